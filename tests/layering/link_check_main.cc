// The entry point of the layers' link checks (cmake/wtx_layers.cmake): an executable made of
// every object of one layer and of the layers below it, and nothing above. It links only if
// no code of the layer calls into a layer above; it is built, never run.
int main() { return 0; }
