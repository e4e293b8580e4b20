// Issue 25: one exit-code table (docs/cli.md "Exit codes", src/util/exit_codes.h) that every
// subcommand follows, one checked read for every file an option names (src/util/file_util.h),
// one checked parse for every integer flag (tools/int_option.h), and daemons that report ready
// only when they are and stop on SIGTERM at every stage. Each case runs the real `wtx` binary.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "src/util/exit_codes.h"
#include "tests/test_util.h"
#include "tools/int_option.h"

namespace {

using wtx::testing::TempDir;
using Run = wtx::testing::CommandResult;
namespace fs = std::filesystem;

std::string Wtx() { return WTX_BINARY; }
std::string Conformance() { return WTX_CONFORMANCE_DIR; }

// Every case runs under a hard limit: a command that blocks (a FIFO opened blocking, a daemon
// that starts when it should have refused) fails the check instead of hanging the test.
Run Sh(const std::string& args) {
  return wtx::testing::RunCommand("timeout -s KILL 30 " + Wtx() + " " + args);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size())) {
    s.replace(i, from.size(), to);
  }
  return s;
}

// The bad inputs every file-valued option is run over.
struct BadFiles {
  TempDir d;
  std::map<std::string, std::string> files;  // kind -> path
  std::string secret, manifest, hf_config, scenario, journal, image, garbage, cert, key;

  BadFiles() {
    files["missing"] = d.sub("missing");
    fs::create_directories(d.sub("directory"));
    files["directory"] = d.sub("directory");
    REQUIRE(::mkfifo(d.sub("fifo").c_str(), 0600) == 0);
    files["fifo"] = d.sub("fifo");
    WriteFile(d.sub("empty"), "");
    files["empty"] = d.sub("empty");
    // Larger than every limit (JSON 1 GiB, PEM 16 MiB, secret 4 KiB, an image its manifest's
    // size), sparse: refused by its size before a byte is read.
    WriteFile(d.sub("oversized"), "");
    fs::resize_file(d.sub("oversized"), (uint64_t{1} << 30) + 1);
    files["oversized"] = d.sub("oversized");
    WriteFile(d.sub("garbage"), "\x01garbage{\"not\": json, nor PEM");
    files["garbage"] = d.sub("garbage");
    garbage = d.sub("garbage");
    WriteFile(d.sub("short"), "x\n");  // a secret file's garbage: far below 16 bytes
    files["short"] = d.sub("short");

    // A valid certificate and key (the certificate its own CA), so that each TLS flag's bad
    // file is the only bad one.
    cert = d.sub("cert.pem");
    key = d.sub("key.pem");
    REQUIRE(std::system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                         "-nodes -keyout " +
                         key + " -out " + cert + " -days 1 -subj /CN=wtx-test > /dev/null 2>&1")
                            .c_str()) == 0);
    secret = d.sub("secret");
    WriteFile(secret, "0123456789abcdef0123456789abcdef");
    manifest = Conformance() + "/models/tiny-manifest.json";
    hf_config = Conformance() + "/models/tiny-qwen2/config.json";
    scenario = d.sub("scenario.json");
    WriteFile(scenario, nlohmann::json{{"ranks", 1},
                                       {"model", {{"manifest_file", manifest}}},
                                       {"kernel_identity", "k"},
                                       {"steps", nlohmann::json::parse(R"([
        {"op": "begin", "tx": "t1", "kind": "full"},
        {"op": "write", "param": "*", "fill": {"seed": 1}},
        {"op": "refresh", "derived": "*"}, {"op": "commit", "tx": "t1"}])")}}
                            .dump());
    Run sim = Sh("sim " + scenario + " --journal-dir " + d.sub("j"));
    REQUIRE(sim.code == 0);
    journal = d.sub("j") + "/rank-0";
    image = d.sub("image");  // a regular file; its size is not the manifest's
    WriteFile(image, "short");
  }

  // {J}: a fresh journal path per run; {S}, {M}, {H}, {SC}, {JD}, {IMG}, {G}, {C}, {K}: the
  // valid inputs (a secret, manifest, HF config, scenario, journal, image, a regular file, a
  // certificate and its key).
  std::string Fill(std::string args, const std::string& file) {
    static int n = 0;
    args = Replace(args, "{J}", d.sub("jr" + std::to_string(n++)));
    args = Replace(args, "{S}", secret);
    args = Replace(args, "{M}", manifest);
    args = Replace(args, "{H}", hf_config);
    args = Replace(args, "{SC}", scenario);
    args = Replace(args, "{JD}", journal);
    args = Replace(args, "{IMG}", image);
    args = Replace(args, "{G}", garbage);
    args = Replace(args, "{C}", cert);
    args = Replace(args, "{K}", key);
    args = Replace(args, "{DIR}", files["directory"]);
    return Replace(args, "@", file);
  }
};

struct FileCase {
  std::string args;             // '@' is the bad file
  std::string flag;             // what the message must name ("" : the path)
  std::set<std::string> kinds;  // the kinds that are invalid for it
};

const std::set<std::string> kAllFileKinds = {"missing", "directory", "fifo",
                                             "empty",   "oversized", "garbage"};
const std::set<std::string> kNotADirectory = {"fifo", "empty", "oversized", "garbage"};
// Any text of 16 bytes or more is a secret: its garbage is a short one.
const std::set<std::string> kSecretKinds = {"missing", "directory", "fifo",
                                            "empty",   "oversized", "short"};

std::vector<FileCase> FileCases() {
  const std::string rank = "rank --connect 127.0.0.1:1 --rank 0 ";
  const std::string coord = "coordinator --listen 127.0.0.1:0 --ranks 1 ";
  const auto all = kAllFileKinds;
  return {
      // Daemons: every file flag, and a --journal that is not a directory.
      {rank + "--journal {J} --manifest {M} --secret-file @", "--secret-file", kSecretKinds},
      {rank + "--journal {J} --secret-file {S} --manifest @", "--manifest", all},
      {rank + "--journal {J} --secret-file {S} --hf-config @ --tp 1", "--hf-config", all},
      {rank + "--journal {J} --secret-file {S} --manifest {M} --tls-cert @ --tls-key {K} "
              "--tls-ca {C}",
       "--tls-cert", all},
      {rank + "--journal {J} --secret-file {S} --manifest {M} --tls-cert {C} --tls-key @ "
              "--tls-ca {C}",
       "--tls-key", all},
      {rank + "--journal {J} --secret-file {S} --manifest {M} --tls-cert {C} --tls-key {K} "
              "--tls-ca @",
       "--tls-ca", all},
      {rank + "--journal @ --secret-file {S} --manifest {M}", "--journal", kNotADirectory},
      {coord + "--journal {J} --secret-file @", "--secret-file", kSecretKinds},
      {coord + "--journal {J} --secret-file {S} --tls-cert @ --tls-key {K} --tls-ca {C}",
       "--tls-cert", all},
      {coord + "--journal {J} --secret-file {S} --tls-cert {C} --tls-key @ --tls-ca {C}",
       "--tls-key", all},
      {coord + "--journal {J} --secret-file {S} --tls-cert {C} --tls-key {K} --tls-ca @",
       "--tls-ca", all},
      {coord + "--journal @ --secret-file {S}", "--journal", kNotADirectory},
      // Control calls: the files are read before anything is sent.
      {"control 127.0.0.1:1 status --secret-file @", "--secret-file", kSecretKinds},
      {"control 127.0.0.1:1 status --secret-file {S} --tls-cert @ --tls-key {K} --tls-ca {C}",
       "--tls-cert", all},
      {"control 127.0.0.1:1 status --secret-file {S} --tls-cert {C} --tls-key @ --tls-ca {C}",
       "--tls-key", all},
      {"control 127.0.0.1:1 status --secret-file {S} --tls-cert {C} --tls-key {K} --tls-ca @",
       "--tls-ca", all},
      // Offline commands.
      {"sim @", "", all},
      {"sim {SC} --expect @", "--expect", all},
      {"sim {SC} --journal-dir @", "--journal-dir", kNotADirectory},
      {"manifest --hf-config @", "--hf-config", all},
      {"load --checkpoint {DIR} --tp 1 --hf-config @", "--hf-config", all},
      {"load --hf-config {H} --tp 1 --checkpoint @", "", all},
      {"load --hf-config {H} --tp 1 --checkpoint {DIR} --journal-dir @", "--journal-dir",
       kNotADirectory},
      {"expect --checkpoint {DIR} --tp 1 --hf-config @", "--hf-config", all},
      {"expect --hf-config {H} --tp 1 --checkpoint @", "", all},
      {"verify {JD} --image {IMG} --manifest @", "--manifest", all},
      {"verify {JD} --manifest {M} --image @", "--image", all},
      {"verify @ --image {IMG} --manifest {M}", "", all},
      {"verify --rank 127.0.0.1:1 --secret-file @", "--secret-file", kSecretKinds},
      {"torture --iterations 1 --dir @", "--dir", kNotADirectory},
      // Issue 45, 5: every model of wtx bench is checked before any work, whichever
      // measurements --only runs; an output file is refused before any work when it is not a
      // regular file.
      {"bench --only coverage --coverage-model @", "--coverage-model", all},
      {"bench --only coverage --model @", "--model", all},
      {"bench --only update --quick --coverage-model @", "--coverage-model", all},
      {"plan --hf-config {H} --tp 1 --trainer fsdp:2 --out @", "--out", {"directory", "fifo"}},
      // Journal readers: DIR missing, empty, or not a directory.
      {"log @", "", all},
      {"show @ t1", "", all},
      {"status @", "", all},
      {"replay @", "", all},
      {"check @", "", all},
  };
}

TEST_CASE("EveryFileOptionRefusesEveryBadFileWithExitTwoNamingFlagAndPath") {
  BadFiles b;
  for (const FileCase& c : FileCases()) {
    for (const std::string& kind : c.kinds) {
      const std::string path = b.files.at(kind);
      const std::string args = b.Fill(c.args, path);
      const auto t0 = std::chrono::steady_clock::now();
      Run r = Sh(args);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      INFO("wtx " << args << " (" << kind << ")\n" << r.out);
      CHECK(r.code == wtx::kExitInvalidInput);
      CHECK(seconds < 10);  // promptly: a FIFO never blocks
      CHECK(r.out.find(path) != std::string::npos);
      if (!c.flag.empty()) CHECK(r.out.find(c.flag) != std::string::npos);
      CHECK(r.out.find("\"ready\":true") == std::string::npos);
    }
  }
}

TEST_CASE("JournalDirectoriesGarbageIsInvalidInputAndCorruptionIsThree") {
  BadFiles b;
  // A directory holding a file that is no journal: invalid input, named.
  fs::create_directories(b.d.sub("notajournal"));
  WriteFile(b.d.sub("notajournal/README"), "hello");
  // A journal whose files are damaged: corrupt.
  const std::string corrupt = b.d.sub("corrupt");
  fs::copy(b.journal, corrupt, fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(corrupt)) {
    if (e.path().extension() != ".log") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(e.path());
    REQUIRE(size > 64);
    for (uint64_t at = 16; at + 16 < size; at += 97) {
      f.seekp(static_cast<std::streamoff>(at));
      f.put('\x5a');
    }
  }
  for (const std::string cmd : {"log", "status", "replay", "check"}) {
    Run r = Sh(cmd + " " + b.d.sub("notajournal"));
    INFO(cmd << ": " << r.out);
    CHECK(r.code == wtx::kExitInvalidInput);
    CHECK(r.out.find(b.d.sub("notajournal")) != std::string::npos);
    r = Sh(cmd + " " + corrupt);
    INFO(cmd << " corrupt: " << r.out);
    CHECK(r.code == wtx::kExitJournalCorrupt);
  }
  Run r = Sh("show " + corrupt + " t1");
  CHECK(r.code == wtx::kExitJournalCorrupt);
  r = Sh("show " + b.journal + " no-such-tx");
  CHECK(r.code == wtx::kExitFailed);
  // A daemon refuses to start on a corrupt journal the same way.
  r = Sh("rank --connect 127.0.0.1:1 --rank 0 --journal " + corrupt + " --secret-file " + b.secret +
         " --manifest " + b.manifest);
  INFO(r.out);
  CHECK(r.code == wtx::kExitJournalCorrupt);
}

TEST_CASE("UsageErrorsExitTwoNamingTheFlag") {
  BadFiles b;
  struct Usage {
    std::string args, names;
  };
  const std::string rank = "rank --connect 127.0.0.1:1 --rank 0 --journal " + b.d.sub("r") +
                           " --secret-file " + b.secret + " ";
  const std::vector<Usage> cases = {
      {"verify", "--rank"},
      {"verify --rank garbage --secret-file " + b.secret, "--rank"},
      {"verify --rank 127.0.0.1:1", "--secret-file"},
      {"verify --reattach " + b.journal, "--reattach"},
      {"verify " + b.journal + " --image " + b.image + " --manifest " + b.manifest, "--image"},
      {rank + "--hf-config " + b.hf_config + " --tp 2 --ep 3", "ep"},
      {rank + "--manifest " + b.manifest + " --hf-config " + b.hf_config, "--hf-config"},
      {"coordinator --ranks 1", "--journal"},
      {"log", "DIR"},
      {"log " + b.journal + " --bogus", "--bogus"},
      {"control 127.0.0.1:1 status --secret-file " + b.secret + " not-json", "params"},
      {"control nohostport status --secret-file " + b.secret, "address"},
      {"sim " + b.scenario + " --transport carrier-pigeon", "--transport"},
      {"manifest --hf-config " + b.hf_config + " --dtype f64", "--dtype"},
  };
  for (const Usage& u : cases) {
    Run r = Sh(u.args);
    INFO("wtx " << u.args << "\n" << r.out);
    CHECK(r.code == wtx::kExitInvalidInput);
    CHECK(r.out.find(u.names) != std::string::npos);
  }
}

// Issue 36, section 3: counts bounded before anything is allocated, an empty --decision-log
// (an unset variable) and a standby of nothing refused, a malformed torture log URL.
TEST_CASE("HugeLayerAndExpertCountsExitTwoNamingTheField") {
  TempDir d;
  const std::string dense = d.sub("dense.json"), moe = d.sub("moe.json");
  std::ifstream in(Conformance() + "/models/tiny-llama/config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json cfg = nlohmann::json::parse(text.str());
  cfg["num_hidden_layers"] = 1000000000;
  WriteFile(dense, cfg.dump());
  std::ifstream in2(Conformance() + "/models/tiny-mixtral/config.json");
  std::stringstream text2;
  text2 << in2.rdbuf();
  nlohmann::json moe_cfg = nlohmann::json::parse(text2.str());
  moe_cfg["num_local_experts"] = 1 << 20;
  WriteFile(moe, moe_cfg.dump());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"manifest --hf-config " + dense + " --tp 1 --rank 0 --summary", "num_hidden_layers"},
      {"expect --checkpoint " + d.path() + " --hf-config " + dense + " --tp 1",
       "num_hidden_layers"},
      {"manifest --hf-config " + moe + " --tp 1 --rank 0 --summary", "num_local_experts"},
  };
  for (const auto& [args, field] : cases) {
    Run r = Sh(args);
    INFO("wtx " << args << "\n" << r.out);
    CHECK(r.code == wtx::kExitInvalidInput);
    CHECK(r.out.find(field) != std::string::npos);
  }
}

TEST_CASE("EmptyDecisionLogStandbyWithoutOneAndBadManifestGroupsExitTwo") {
  BadFiles b;
  const std::string coord = "coordinator --listen 127.0.0.1:0 --ranks 1 --journal " + b.d.sub("c") +
                            " --secret-file " + b.secret + " ";
  const std::string rank = "rank --connect 127.0.0.1:1 --rank 0 --journal " + b.d.sub("r") +
                           " --secret-file " + b.secret + " --manifest " + b.manifest + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {coord + "--decision-log ''", "--decision-log"},
      {rank + "--decision-log ''", "--decision-log"},
      {coord + "--standby", "--standby"},
      {coord + "--manifest-groups 0,1", "--manifest-groups"},   // two values for --ranks 1
      {coord + "--manifest-groups x", "--manifest-groups"},     // not an integer
      {coord + "--manifest-groups -1", "--manifest-groups"},    // out of range
      {coord + "--manifest-groups 4097", "--manifest-groups"},  // out of range
      {coord + "--manifest-groups 0,", "--manifest-groups"},    // an empty value
      {coord + "--manifest-groups 1.5", "--manifest-groups"},   // not an integer
      {"torture --iterations 1 --decision-log etcd:///", "--decision-log"},
  };
  for (const auto& [args, flag] : cases) {
    Run r = Sh(args);
    INFO("wtx " << args << "\n" << r.out);
    CHECK(r.code == wtx::kExitInvalidInput);
    CHECK(r.out.find(flag) != std::string::npos);
    CHECK(r.out.find("VIOLATION") == std::string::npos);
  }
}

// Issue 36, 2.6: a driver's script reads the outcome from the exit status.
TEST_CASE("ControlExitStatusSaysHowTheTransactionWent") {
  using nlohmann::json;
  const json ok = {{"code", "OK"}, {"message", ""}};
  CHECK(wtx::ControlAnswerExitCode("commit", {{"decision", "commit"}, {"status", ok}}) == 0);
  CHECK(wtx::ControlAnswerExitCode("commit", {{"decision", "noop"}, {"status", ok}}) == 0);
  CHECK(wtx::ControlAnswerExitCode(
            "commit", {{"decision", "abort"}, {"status", {{"code", "E_VOTE_NO"}}}}) == 1);
  CHECK(wtx::ControlAnswerExitCode(
            "commit", {{"decision", nullptr}, {"status", {{"code", "E_CRASHED"}}}}) == 6);
  CHECK(wtx::ControlAnswerExitCode(
            "commit",
            {{"decision", nullptr}, {"status", {{"code", "E_DECISION_LOG_UNAVAILABLE"}}}}) == 6);
  CHECK(wtx::ControlAnswerExitCode("begin", {{"status", {{"code", "E_STALE_COORDINATOR"}}}}) == 6);
  CHECK(wtx::ControlAnswerExitCode("begin", {{"status", {{"code", "E_DIRTY"}}}}) == 1);
  CHECK(wtx::ControlAnswerExitCode("begin", {{"status", ok}}) == 0);
  CHECK(wtx::ControlAnswerExitCode("decisions", {{"decisions", json::array()}}) == 0);
  // Through the binary: a commit of a transaction nobody began is decided abort: exit 1.
  TempDir d;
  const std::string secret = d.sub("secret");
  WriteFile(secret, "0123456789abcdef0123456789abcdef");
  Run r = wtx::testing::RunCommand(
      "(timeout -s KILL 20 " + Wtx() + " coordinator --listen 127.0.0.1:0 --ranks 1 --journal " +
      d.sub("c") + " --secret-file " + secret + " > " + d.sub("ready") +
      " 2>/dev/null & p=$!; for i in $(seq 50); do grep -q ready " + d.sub("ready") +
      " && break; sleep 0.1; done; port=$(sed 's/.*\"port\":\\([0-9]*\\).*/\\1/' " +
      d.sub("ready") + "); timeout 10 " + Wtx() +
      " control 127.0.0.1:$port commit '{\"tx\":\"nobody\"}' --secret-file " + secret +
      "; c=$?; kill -TERM $p; wait $p; exit $c)");
  INFO(r.out);
  CHECK(r.code == wtx::kExitFailed);
  CHECK(r.out.find("\"decision\":\"abort\"") != std::string::npos);
}

// Issue 36, 2.5: a peer that goes away mid-handshake is a connection failure (4), worded as
// one; only disagreeing credentials are "wrong secret" (2).
TEST_CASE("AConnectionCutDuringTheTlsHandshakeExitsFourAndAWrongSecretTwo") {
  TempDir d;
  const std::string cutter = d.sub("cutter.py");
  WriteFile(cutter,
            "import socket\n"
            "s = socket.socket()\n"
            "s.bind(('127.0.0.1', 0))\n"
            "s.listen(4)\n"
            "print(s.getsockname()[1], flush=True)\n"
            "for _ in range(3):\n"
            "    c, _ = s.accept()\n"
            "    c.recv(100)\n"
            "    c.close()\n");
  const std::string secret = d.sub("secret"), other = d.sub("other");
  WriteFile(secret, "0123456789abcdef0123456789abcdef");
  WriteFile(other, "fedcba9876543210fedcba9876543210");
  Run cut = wtx::testing::RunCommand("(timeout -s KILL 20 /usr/bin/python3 " + cutter + " > " +
                                     d.sub("port") + " & for i in $(seq 50); do [ -s " +
                                     d.sub("port") + " ] && break; sleep 0.1; done; " +
                                     "timeout 10 " + Wtx() + " control 127.0.0.1:$(cat " +
                                     d.sub("port") + ") decisions --secret-file " + secret + ")");
  INFO(cut.out);
  CHECK(cut.code == wtx::kExitUnreachable);
  CHECK(cut.out.find("during the TLS handshake") != std::string::npos);
  CHECK(cut.out.find("wrong secret") == std::string::npos);
  Run wrong = wtx::testing::RunCommand(
      "(timeout -s KILL 20 " + Wtx() + " coordinator --listen 127.0.0.1:0 --ranks 1 --journal " +
      d.sub("c") + " --secret-file " + secret + " > " + d.sub("ready") +
      " 2>/dev/null & p=$!; for i in $(seq 50); do grep -q ready " + d.sub("ready") +
      " && break; sleep 0.1; done; port=$(sed 's/.*\"port\":\\([0-9]*\\).*/\\1/' " +
      d.sub("ready") + "); timeout 10 " + Wtx() + " control 127.0.0.1:$port decisions " +
      "--secret-file " + other + "; c=$?; kill -TERM $p; wait $p; exit $c)");
  INFO(wrong.out);
  CHECK(wrong.code == wtx::kExitInvalidInput);
  CHECK(wrong.out.find("wrong secret") != std::string::npos);
}

TEST_CASE("AnUnreachablePeerExitsFour") {
  BadFiles b;
  Run r = Sh("control 127.0.0.1:1 status --secret-file " + b.secret);
  INFO(r.out);
  CHECK(r.code == wtx::kExitUnreachable);
  CHECK(r.out.find("127.0.0.1:1") != std::string::npos);
  r = Sh("verify --rank 127.0.0.1:1 --secret-file " + b.secret);
  INFO(r.out);
  CHECK(r.code == wtx::kExitUnreachable);
}

// SIGTERM while start-up is slow (every synced journal write sleeps 10 s): the daemon exits 0
// at once, saying at which stage, and never printed a ready line.
TEST_CASE("SigtermDuringStartupStopsEveryDaemonPromptly") {
  BadFiles b;
  const std::vector<std::string> daemons = {
      "rank --connect 127.0.0.1:1 --rank 0 --journal " + b.d.sub("slow-rank") + " --secret-file " +
          b.secret + " --manifest " + b.manifest + " --sync-delay-ms 10000",
      "coordinator --listen 127.0.0.1:0 --ranks 1 --journal " + b.d.sub("slow-coordinator") +
          " --secret-file " + b.secret + " --sync-delay-ms 10000",
  };
  for (const std::string& d : daemons) {
    const auto t0 = std::chrono::steady_clock::now();
    Run r = wtx::testing::RunCommand("(timeout -s KILL 30 " + Wtx() + " " + d +
                                     " & p=$!; sleep 1; kill -TERM $p; wait $p)");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(d << "\n" << r.out);
    CHECK(r.code == wtx::kExitOk);
    CHECK(seconds < 20);  // stopped by the SIGTERM, not by the 30 s KILL
    CHECK(r.out.find("stopped by SIGTERM during start-up") != std::string::npos);
    CHECK(r.out.find("\"ready\":true") == std::string::npos);
  }
}

// ---- integer flags ----

struct IntFlag {
  std::string command;  // the subcommand and its other arguments (failing after parsing)
  std::string flag;
  int64_t min, max;
};

std::string Plus1(int64_t v) {
  return v == INT64_MAX ? "9223372036854775808" : std::to_string(v + 1);
}
std::string Minus1(int64_t v) {
  return v == INT64_MIN ? "-9223372036854775809" : std::to_string(v - 1);
}

// Every integer flag of every subcommand, with its documented range (docs/cli.md). The other
// arguments make the command fail right after parsing (a missing file), so that an accepted
// value never starts anything.
std::vector<IntFlag> IntFlags(const std::string& missing, const std::string& file) {
  const std::string M = WTX_CONFORMANCE_DIR "/models/tiny-manifest.json";
  const std::string coord =
      "coordinator --ranks 1 --journal " + missing + " --secret-file " + missing;
  const std::string coord_no_ranks =
      "coordinator --journal " + missing + " --secret-file " + missing;
  const std::string rank = "rank --connect 127.0.0.1:1 --journal " + missing + " --secret-file " +
                           missing + " --manifest " + M;
  const std::string rank0 = rank + " --rank 0";
  const std::string hf = std::string(" --hf-config ") + missing;
  const std::string ck = " --checkpoint " + missing + hf;
  const int64_t day = int64_t{86400000};
  const std::string torture = "torture --dir " + file;
  const std::string bench = "bench --scratch-dir " + missing + " --only nonsense";
  const std::string fleet_policy = "fleet policy --decision-log etcd://127.0.0.1:1/p --fleet f";
  const std::string catch_up =
      "fleet catch-up --decision-log etcd://127.0.0.1:1/p --fleet f --replica b --coordinator "
      "127.0.0.1:1 --secret-file " +
      missing;
  return {
      {coord_no_ranks, "--ranks", 1, 4096},
      {coord, "--prepare-timeout-ms", 1, day},
      {coord, "--request-timeout-ms", 1, day},
      {coord, "--startup-wait-ms", 0, day},
      {coord, "--max-frame-bytes", 4096, 4294967295},
      {coord, "--max-connections", 1, 1048576},
      {coord, "--sync-delay-ms", 0, 10000},
      {rank, "--rank", 0, 4095},
      {rank0, "--tp", 1, 4096},
      {rank0, "--ep", 1, 4096},
      {rank0, "--sync-delay-ms", 0, 10000},
      {rank0, "--rollback-budget-bytes", 0, INT64_MAX},
      {rank0, "--landing-hash-threads", 0, 256},
      {rank0, "--threads", 0, 256},
      {"load" + ck + " --tp 1", "--threads", 0, 256},
      {"load" + ck + " --tp 1", "--step", 0, INT64_MAX},
      {bench, "--threads", 0, 256},
      {rank0, "--backoff-max-ms", 1, day},
      {rank0, "--request-timeout-ms", 1, day},
      {rank0, "--max-frame-bytes", 4096, 4294967295},
      {"control 127.0.0.1:1 status --secret-file " + missing, "--timeout-ms", 1, day},
      {"check " + missing, "--expect-rank", 0, 4095},
      {"manifest" + hf, "--tp", 1, 4096},
      {"manifest" + hf, "--ep", 1, 4096},
      {"manifest" + hf, "--rank", 0, 4095},
      {"load" + ck, "--tp", 1, 4096},
      {"expect" + ck, "--tp", 1, 4096},
      {torture, "--iterations", 1, 1000000000},
      {torture, "--seed", 0, INT64_MAX},
      {torture, "--start", 0, INT64_MAX - 1000000000},
      {torture, "--ranks", 1, 8},
      {torture, "--transactions", 0, 10000},
      {bench, "--coverage-tp", 1, 4096},
      {bench, "--landing-bucket-mib", 0, 65536},
      {coord, "--lease-ttl-ms", 1000, 600000},
      {coord, "--leader-wait-ms", 0, day},
      {coord, "--retain-decisions", 0, INT64_MAX},
      {coord, "--decision-log-timeout-ms", 1, day},
      {rank0, "--decision-log-timeout-ms", 1, day},
      {rank0, "--heartbeat-ms", 10, day},
      {rank0, "--replica-ranks", 0, 4096},
      {rank0, "--fleet-ttl-ms", 1000, 600000},
      {rank0, "--fleet-period-ms", 0, 600000},
      {fleet_policy, "--max-lag", 0, INT64_MAX},
      {fleet_policy, "--quorum", 0, 4096},
      {fleet_policy, "--decision-log-timeout-ms", 1, day},
      {"fleet status --decision-log etcd://127.0.0.1:1/p --fleet f", "--decision-log-timeout-ms", 1,
       day},
      {catch_up, "--timeout-ms", 1, day},
      {catch_up, "--decision-log-timeout-ms", 1, day},
      {"sim " + missing, "--decision-log-timeout-ms", 1, day},
      {"log " + missing, "--decision-log-timeout-ms", 1, day},
      {"show " + missing + " t", "--decision-log-timeout-ms", 1, day},
      {"status " + missing, "--decision-log-timeout-ms", 1, day},
      {"check " + missing, "--decision-log-timeout-ms", 1, day},
  };
}

TEST_CASE("EveryIntegerFlagIsCheckedAtItsBoundaries") {
  TempDir d;
  const std::string missing = d.sub("missing");
  WriteFile(d.sub("file"), "x");
  for (const IntFlag& f : IntFlags(missing, d.sub("file"))) {
    const std::string range = "[" + std::to_string(f.min) + ", " + std::to_string(f.max) + "]";
    std::vector<std::string> bad = {Minus1(f.min),
                                    Plus1(f.max),
                                    "9223372036854775808",
                                    "18446744073709551616",
                                    "99999999999999999999999",
                                    "-99999999999999999999999",
                                    "12abc",
                                    "0x10",
                                    "1.5",
                                    "garbage"};
    if (f.min >= 0) bad.push_back("-1");
    for (const std::string& v : bad) {
      Run r = Sh(f.command + " " + f.flag + " " + v);
      INFO("wtx " << f.command << " " << f.flag << " " << v << "\n" << r.out);
      CHECK(r.code == wtx::kExitInvalidInput);
      CHECK(r.out.find(f.flag) != std::string::npos);
      CHECK(r.out.find(v) != std::string::npos);
      CHECK(r.out.find(range) != std::string::npos);
    }
    for (const std::string& v : {std::to_string(f.min), std::to_string(f.max)}) {
      Run r = Sh(f.command + " " + f.flag + " " + v);
      INFO("wtx " << f.command << " " << f.flag << " " << v << "\n" << r.out);
      CHECK(r.out.find(range) == std::string::npos);  // refused for another reason only
      CHECK(r.code != 0);
    }
  }
}

// The table above lists every integer flag: any flag whose help shows an integer type must be
// in it, declared with its range (AddIntOption shows "INT in [min, max]").
TEST_CASE("EveryIntegerFlagOfEverySubcommandIsInTheBoundaryTable") {
  TempDir d;
  std::set<std::pair<std::string, std::string>> listed;
  for (const IntFlag& f : IntFlags(d.sub("m"), d.sub("f"))) {
    // The subcommand: its first word, or two for `wtx fleet ...`.
    size_t end = f.command.find(' ');
    if (f.command.rfind("fleet ", 0) == 0) end = f.command.find(' ', end + 1);
    listed.insert({f.command.substr(0, end), f.flag});
  }
  const std::regex option(R"(^\s+(?:-\w,\s*)?(--[\w-]+)\s+(U?INT)\b(.*)$)");
  size_t seen = 0;
  for (const std::string sub :
       {"sim", "log", "show", "status", "replay", "check", "manifest", "bench", "coordinator",
        "rank", "control", "torture", "verify", "load", "expect", "fleet status", "fleet policy",
        "fleet catch-up"}) {
    Run r = wtx::testing::RunCommand(Wtx() + " " + sub + " --help");
    REQUIRE(r.code == 0);
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
      std::smatch m;
      if (!std::regex_match(line, m, option)) continue;
      ++seen;
      INFO(sub << ": " << line);
      CHECK(listed.count({sub, m[1].str()}) == 1);
      CHECK(m[3].str().find("in [") != std::string::npos);
    }
  }
  CHECK(seen == listed.size());
}

// The helper itself, on every integer type it is used with: CLI11's own conversion would
// saturate 2^63 to INT64_MAX and read 010 as 8.
template <typename T>
std::pair<bool, T> ParseInt(const std::string& value, int64_t min, int64_t max) {
  CLI::App app;
  T v{};
  wtx::tools::AddIntOption(&app, "--x", &v, min, max, "x");
  std::vector<std::string> args = {value, "--x"};  // reversed, as CLI11 takes them
  try {
    app.parse(args);
  } catch (const CLI::ParseError&) {
    return {false, T{}};
  }
  return {true, v};
}

TEST_CASE("AddIntOptionParsesDecimalWithAnOverflowCheck") {
  CHECK(ParseInt<int64_t>("9223372036854775807", 0, INT64_MAX) ==
        std::pair<bool, int64_t>{true, INT64_MAX});
  CHECK_FALSE(ParseInt<int64_t>("9223372036854775808", 0, INT64_MAX).first);
  CHECK_FALSE(ParseInt<size_t>("18446744073709551616", 0, INT64_MAX).first);
  CHECK_FALSE(ParseInt<size_t>("18446744073709551615", 0, INT64_MAX).first);
  CHECK_FALSE(ParseInt<size_t>("-1", 0, INT64_MAX).first);
  CHECK(ParseInt<int64_t>("-9223372036854775808", INT64_MIN, 0) ==
        std::pair<bool, int64_t>{true, INT64_MIN});
  CHECK_FALSE(ParseInt<int64_t>("-9223372036854775809", INT64_MIN, 0).first);
  CHECK(ParseInt<int>("010", 0, 100) == std::pair<bool, int>{true, 10});
  CHECK_FALSE(ParseInt<int>("0x10", 0, 100).first);
  CHECK_FALSE(ParseInt<int>("+5", 0, 100).first);
  CHECK_FALSE(ParseInt<int>("-", -5, 100).first);
  CHECK_FALSE(ParseInt<int>("", 0, 100).first);
  CHECK_FALSE(ParseInt<int>("4294967297", 0, INT32_MAX).first);  // not truncated to 1
  CHECK(ParseInt<int>("2147483647", 0, INT32_MAX) == std::pair<bool, int>{true, INT32_MAX});
  CHECK(ParseInt<uint64_t>("0", 0, 5) == std::pair<bool, uint64_t>{true, 0});
  CHECK_FALSE(ParseInt<uint64_t>("6", 0, 5).first);
}

}  // namespace

TEST_CASE("EmptyValuesAndBadLayoutsAreRefusedWithExitTwoBeforeAnyWork") {
  // Issue 45, 5: an empty value given for a flag is refused, not taken for the default; a
  // coverage degree the model cannot take exits 2 before any measurement starts.
  const std::string kimi = Conformance() + "/models/kimi-k2/config.json";
  const std::string tiny = Conformance() + "/models/tiny-qwen2/config.json";
  TempDir d;
  struct Case {
    std::string args, names;
  };
  const Case cases[] = {
      {"bench --only coverage --coverage-model " + kimi + " --coverage-tp 3", "--coverage-tp 3"},
      {"bench --only coverage --coverage-model ''", "--coverage-model: empty"},
      {"bench --only coverage --model ''", "--model: empty"},
      {"plan --hf-config " + tiny + " --tp 1 --trainer fsdp:2 --out ''", "--out"},
      {"plan --hf-config " + tiny + " --tp 1 --trainer fsdp:2 --dtype ''", "--dtype: empty"},
      {"manifest --hf-config " + tiny + " --tp 1 --dtype ''", "--dtype: empty"},
  };
  for (const Case& c : cases) {
    Run r = Sh(c.args);
    INFO("wtx " << c.args << "\n" << r.out);
    CHECK(r.code == wtx::kExitInvalidInput);
    CHECK(r.out.find(c.names) != std::string::npos);
    CHECK(r.out.find("coverage_check") == std::string::npos);  // no measurement ran
  }
}

TEST_CASE("StatusWithADecisionLogReadsItEvenWithNothingPending") {
  // Issue 45, 5: "reconciled_with" is said only of a log that answered: a dead endpoint is
  // exit 4 naming it, even for a journal with nothing pending.
  BadFiles b;
  const std::string dead = "etcd://127.0.0.1:1/wtx";
  // The scenario's coordinator journal: every decision ended, nothing pending.
  const std::string coordinator = fs::path(b.journal).parent_path().string() + "/coordinator";
  Run r =
      Sh("status " + coordinator + " --decision-log " + dead + " --decision-log-timeout-ms 300");
  INFO(r.out);
  CHECK(r.code == wtx::kExitUnreachable);
  CHECK(r.out.find("127.0.0.1:1") != std::string::npos);
  CHECK(r.out.find("reconciled_with") == std::string::npos);
}
