// Owner of the tests' precompiled header (tests/CMakeLists.txt, wtx_test_pch): the header
// is compiled with this target; the target itself does nothing.
int main() { return 0; }
