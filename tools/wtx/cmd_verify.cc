// `wtx verify DIR --image FILE --manifest FILE`: do a rank's live bytes still equal its
// committed version? A journal holds no live bytes, so the live bytes come as an image (every
// parameter's bytes concatenated in manifest order; wtx::DumpLiveImage writes one). The rank
// digest of the image is recomputed (content_hash.h) and compared with the digest the rank
// journaled in the PREPARED record of its committed transaction (include/wtx/live_verify.h).
// The journal is opened read-only (safe beside a running process). On a terminal (and
// without --json) reading the image shows its progress on stderr (progress.h).
//
// `wtx verify --rank HOST:PORT --secret-file F`: the same question asked of a running rank
// (`wtx rank --control HOST:PORT`): it runs Participant::Verify() on its live bytes (every
// chunk rehashed and compared with the committed chunk digests; differences are named by
// parameter, chunk range and box, and make the rank durably dirty). `--reattach` runs
// Participant::Reattach() instead (after a wtx restart over surviving engine memory).
//
// Exit codes (src/util/exit_codes.h): 0 match, 1 mismatch (bytes changed outside a
// transaction), 2 bad usage or input (missing, unreadable or invalid image, manifest, secret or
// journal directory; an image of the wrong size), 3 corrupt journal, 4 rank unreachable or no
// answer in time, 5 not comparable (never committed, or dirty).
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include <nlohmann/json.hpp>

#include "src/net/control.h"
#include "src/util/file_util.h"
#include "tools/wtx/commands.h"
#include "tools/wtx/progress.h"
#include "wtx/live_verify.h"

namespace wtx::cli {

namespace {

struct VerifyArgs {
  std::string dir;
  std::string image;
  std::string manifest;
  std::string rank;  // HOST:PORT of a rank's control port
  std::string secret_file;
  bool reattach = false;
  bool json = false;
};

int VerifyFail(int code, const Status& s) {
  std::cerr << "wtx verify: " << s.ToString() << "\n";
  return code;
}

int VerifyFail(const Status& s) { return VerifyFail(ExitCodeFor(s), s); }

int RunVerifyRank(const VerifyArgs& a) {
  if (a.secret_file.empty()) return VerifyFail(Status::InvalidArgument("--rank needs --secret-file"));
  auto secret = net::ReadSecretFile(a.secret_file, "--secret-file");
  if (!secret.ok()) return VerifyFail(secret.status());
  auto hp = net::ParseHostPort(a.rank);
  if (!hp.ok()) return VerifyFail(Status::InvalidArgument("--rank: " + hp.status().message()));
  auto c = net::ControlClient::Connect(hp->first, hp->second, secret.value(), net::NetOptions(),
                                       "control");
  if (!c.ok()) return VerifyFail(PeerExitCode(c.status()), c.status());
  bool transport_error = false;
  auto r = c.value()->Call(a.reattach ? "reattach" : "verify", nlohmann::json::object(),
                           std::chrono::minutes(10), &transport_error);
  if (!r.ok()) return VerifyFail(transport_error ? kExitUnreachable : kExitFailed, r.status());
  const nlohmann::json& rep = r.value();
  if (a.json) {
    std::cout << rep.dump(2) << "\n";
  } else {
    std::cout << rep.value("message", std::string()) << "\n";
  }
  if (!rep.value("comparable", false)) return kExitNotComparable;
  return rep.value("ok", false) ? kExitOk : kExitFailed;
}

int RunVerify(const VerifyArgs& a) {
  if (!a.rank.empty()) {
    if (!a.dir.empty() || !a.image.empty() || !a.manifest.empty()) {
      return VerifyFail(Status::InvalidArgument("--rank takes no DIR, --image or --manifest"));
    }
    return RunVerifyRank(a);
  }
  if (a.reattach) return VerifyFail(Status::InvalidArgument("--reattach needs --rank"));
  if (a.dir.empty() || a.image.empty() || a.manifest.empty()) {
    return VerifyFail(Status::InvalidArgument(
        "give a journal DIR with --image and --manifest, or a running rank with --rank"));
  }
  if (Status s = CheckDirectoryArg("DIR", a.dir, /*must_exist=*/true, /*must_hold_files=*/true);
      !s.ok()) {
    return VerifyFail(s);
  }
  auto mtext = ReadFileArg("--manifest", a.manifest);
  if (!mtext.ok()) return VerifyFail(mtext.status());
  auto manifest = ParseManifestText(mtext.value());
  if (!manifest.ok()) {
    return VerifyFail(
        Status::InvalidArgument("--manifest '" + a.manifest + "': " + manifest.status().message()));
  }
  // An image holds exactly the manifest's bytes: a longer file is refused unread.
  const auto total = static_cast<size_t>(manifest.value()->TotalBytes());
  // Progress on a terminal (progress.h): the image's bytes read.
  Progress progress("verify: reading the image", static_cast<int64_t>(total),
                    Progress::Unit::kBytes, ProgressWanted(a.json));
  ReadFileOptions ro;
  ro.what = "--image";
  ro.max_bytes = total;
  ro.on_read = [&progress](size_t n) { progress.Add(static_cast<int64_t>(n)); };
  auto image = ReadRegularFile(a.image, ro);
  progress.Finish();
  if (!image.ok()) return VerifyFail(image.status());
  const std::string& bytes = image.value();
  if (bytes.size() != total) {
    return VerifyFail(Status::InvalidArgument(
        "--image '" + a.image + "': " + std::to_string(bytes.size()) + " bytes, the manifest's " +
        "parameters hold " + std::to_string(total)));
  }
  auto r = VerifyImage(*manifest.value(),
                       {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, a.dir);
  if (!r.ok()) return VerifyFail(r.status());
  const LiveVerifyReport& rep = r.value();
  if (a.json) {
    nlohmann::json j = {{"committed_tx", rep.committed.committed_tx},
                        {"version", rep.committed.version},
                        {"dirty", rep.committed.dirty},
                        {"committed_digest", rep.committed.rank_digest},
                        {"live_digest", rep.live_digest},
                        {"comparable", rep.comparable},
                        {"match", rep.match},
                        {"message", rep.message}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << rep.message << "\n";
  }
  if (!rep.comparable) return kExitNotComparable;
  return rep.match ? kExitOk : kExitFailed;
}

}  // namespace

void RegisterVerifyCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check a rank's live bytes against its committed version: a running rank (--rank), or a "
      "live image and the journal DIR");
  cmd->add_option("dir", args->dir, "the rank's journal directory (offline, with --image)");
  cmd->add_option("--image", args->image,
                  "live image: every parameter's bytes, manifest order (DumpLiveImage)");
  cmd->add_option("--manifest", args->manifest, "the rank's manifest (JSON)");
  cmd->add_option("--rank", args->rank,
                  "HOST:PORT: the control port of a running `wtx rank`; runs its verifier");
  cmd->add_option("--secret-file", args->secret_file, "with --rank: the shared secret file");
  cmd->add_flag("--reattach", args->reattach,
                "with --rank: Reattach (verify, and serve again on an exact match)");
  cmd->add_flag("--json", args->json, "JSON output");
  cmd->callback([args, exit_code] { *exit_code = RunVerify(*args); });
}

}  // namespace wtx::cli
