// `wtx control HOST:PORT[,HOST:PORT...] --secret-file F METHOD [PARAMS_JSON]`
//
// One authenticated control call to a `wtx coordinator` (its --listen port) or a `wtx rank`
// (its --control port), printing the JSON answer (src/net/control_service.h lists the methods).
// With several addresses (a leader and its standbys) each is asked "leader" in order, and the
// call goes to the first that leads (named on stderr); none leading is exit 4.
// Exit 0 on an answer, 1 when the process answered with an error, 2 on bad usage or input (a
// bad address, secret file or TLS file), 4 when the peer cannot be reached or does not answer
// in time (src/util/exit_codes.h). Example: wtx control 127.0.0.1:7070 --secret-file s begin
//   '{"req": {"tx": "t1", "kind": "full", "base": "", "modules": [], "sources": [],
//             "rollback": false}}'
#include <algorithm>
#include <chrono>
#include <iostream>

#include "src/net/codec.h"
#include "src/net/control.h"
#include "src/net/tls.h"
#include "tools/wtx/commands.h"

namespace wtx::cli {

namespace {

struct ControlTls {
  TlsFiles tls;
};

// How long each address may take to connect and say whether it leads.
constexpr std::chrono::milliseconds kLeaderProbe{2000};

// With several addresses (a leader and its standbys): the one whose "leader" call answers
// leads: true, asked in order, each address's connection, handshake and answer together bounded
// by `probe`; a line on stderr names the one chosen. An address that refuses us, is not a wtx
// coordinator of this cluster (another secret, an HTTP server, garbage) or does not answer is
// skipped like one that does not lead; only this invocation's own TLS files (checked before any
// address is asked) end the search with kInvalidArgument. kCrashed naming every address when
// none leads.
Result<std::unique_ptr<net::ControlClient>> FindLeader(
    const std::vector<std::pair<std::string, uint16_t>>& addresses, const std::string& secret,
    net::NetOptions no, std::chrono::milliseconds probe, std::string* chosen) {
  if (!no.tls.cert.empty() || !no.tls.key.empty() || !no.tls.ca.empty()) {
    auto own = net::MakeTlsContext(/*server=*/false, secret, no.tls);
    if (!own.ok()) return own.status();
  }
  // Connection and handshake share one timer (connect + handshake): half the probe each.
  no.connect_timeout = std::max(probe / 2, std::chrono::milliseconds(1));
  no.handshake_timeout = std::max(probe - no.connect_timeout, std::chrono::milliseconds(1));
  std::string tried;
  for (const auto& [host, port] : addresses) {
    const std::string name = host + ":" + std::to_string(port);
    const auto t0 = std::chrono::steady_clock::now();
    std::string why;
    auto c = net::ControlClient::Connect(host, port, secret, no, "control");
    if (!c.ok()) {
      why = c.status().ToString();
    } else {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t0);
      const auto left = std::max(probe - spent, std::chrono::milliseconds(1));
      auto r = c.value()->Call("leader", nlohmann::json::object(), left);
      if (r.ok() && r->is_object() && r->value("leads", false)) {
        std::cerr << "wtx control: " << name << " leads " << r->value("decision_log", "")
                  << " (epoch " << r->value("epoch", 0) << ")\n";
        *chosen = name;
        return std::move(c).value();
      }
      why = r.ok() ? "does not lead: " + r->dump() : r.status().ToString();
    }
    if (!tried.empty()) tried += "; ";
    tried += name + " (" + why + ")";
  }
  return Status(ErrorCode::kCrashed, "no coordinator leads: " + tried);
}

int RunControl(const std::string& address, const std::string& secret_file,
               const std::string& method, const std::string& params_text, int64_t timeout_ms,
               const TlsFiles& tls) {
  auto fail = [](int code, const std::string& message) {
    std::cerr << "wtx control: " << message << "\n";
    return code;
  };
  auto secret = net::ReadSecretFile(secret_file, "--secret-file");
  if (!secret.ok()) return fail(ExitCodeFor(secret.status()), secret.status().message());
  auto list = ParseHostPortList(address);
  if (!list.ok()) return fail(kExitInvalidInput, "address: " + list.status().message());
  nlohmann::json params = nlohmann::json::object();
  if (!params_text.empty()) {
    params = nlohmann::json::parse(params_text, nullptr, false);
    if (!params.is_object()) return fail(kExitInvalidInput, "params: not a JSON object");
  }
  net::NetOptions no;
  no.tls = tls;
  std::string target = address;
  const auto probe = std::min(std::chrono::milliseconds(timeout_ms), kLeaderProbe);
  auto c = list->size() == 1
               ? net::ControlClient::Connect(list->front().first, list->front().second,
                                             secret.value(), no, "control")
               : FindLeader(*list, secret.value(), no, probe, &target);
  // A bad TLS file is the input's fault (2); a peer that cannot be reached is not (4).
  if (!c.ok()) return fail(PeerExitCode(c.status()), address + ": " + c.status().ToString());
  bool transport_error = false;
  auto r = c.value()->Call(method, params, std::chrono::milliseconds(timeout_ms), &transport_error);
  if (!r.ok()) {
    std::cout << net::StatusToJson(r.status()).dump() << "\n";
    if (transport_error) return fail(kExitUnreachable, target + ": " + r.status().ToString());
    return kExitFailed;  // the peer answered with an error
  }
  std::cout << r.value().dump() << "\n";
  return ControlAnswerExitCode(method, r.value());
}

}  // namespace

CLI::Validator HostPortCheck() {
  return CLI::Validator(
      [](std::string& s) {
        auto hp = net::ParseHostPort(s);
        return hp.ok() ? std::string() : hp.status().message();
      },
      "HOST:PORT");
}

CLI::Validator HostPortListCheck() {
  return CLI::Validator(
      [](std::string& s) {
        auto list = ParseHostPortList(s);
        return list.ok() ? std::string() : list.status().message();
      },
      "HOST:PORT[,HOST:PORT...]");
}

Result<std::vector<std::pair<std::string, uint16_t>>> ParseHostPortList(const std::string& s) {
  std::vector<std::pair<std::string, uint16_t>> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(',', start);
    const std::string one = s.substr(start, comma == std::string::npos ? comma : comma - start);
    auto hp = net::ParseHostPort(one);
    if (!hp.ok()) return hp.status();
    out.push_back(std::move(hp).value());
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

void RegisterControlCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("control", "One control call to a wtx coordinator or rank");
  auto address = std::make_shared<std::string>();
  auto secret = std::make_shared<std::string>();
  auto method = std::make_shared<std::string>();
  auto params = std::make_shared<std::string>();
  auto timeout = std::make_shared<int64_t>(60000);
  cmd->add_option("address", *address,
                  "HOST:PORT, or HOST:PORT,HOST:PORT,... (coordinators: the call goes to the one "
                  "that leads)")
      ->required();
  cmd->add_option("method", *method, "begin, commit, abort, decisions, status, step, ...")
      ->required();
  cmd->add_option("params", *params, "JSON object of parameters");
  cmd->add_option("--secret-file", *secret, "File holding the shared secret")->required();
  AddIntOption(cmd, "--timeout-ms", timeout.get(), kTimeoutMsBounds,
               "How long to wait for the answer")
      ->capture_default_str();
  auto a = std::make_shared<ControlTls>();
  AddTlsOptions(cmd, &a->tls);
  cmd->callback(
      [=] { *exit_code = RunControl(*address, *secret, *method, *params, *timeout, a->tls); });
}

}  // namespace wtx::cli
