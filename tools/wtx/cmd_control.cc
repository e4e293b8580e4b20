// `wtx control HOST:PORT --secret-file F METHOD [PARAMS_JSON]`
//
// One authenticated control call to a `wtx coordinator` (its --listen port) or a `wtx rank`
// (its --control port), printing the JSON answer (src/net/control_service.h lists the methods).
// Exit 0 on an answer, 1 when the process answered with an error, 2 on bad usage or input (a
// bad address, secret file or TLS file), 4 when the peer cannot be reached or does not answer
// in time (src/util/exit_codes.h). Example: wtx control 127.0.0.1:7070 --secret-file s begin
//   '{"req": {"tx": "t1", "kind": "full", "base": "", "modules": [], "sources": [],
//             "rollback": false}}'
#include <iostream>

#include "src/net/codec.h"
#include "src/net/control.h"
#include "tools/wtx/commands.h"

namespace wtx::cli {

namespace {

struct ControlTls {
  TlsFiles tls;
};

int RunControl(const std::string& address, const std::string& secret_file,
               const std::string& method, const std::string& params_text, int64_t timeout_ms,
               const TlsFiles& tls) {
  auto fail = [](int code, const std::string& message) {
    std::cerr << "wtx control: " << message << "\n";
    return code;
  };
  auto secret = net::ReadSecretFile(secret_file, "--secret-file");
  if (!secret.ok()) return fail(ExitCodeFor(secret.status()), secret.status().message());
  auto hp = net::ParseHostPort(address);
  if (!hp.ok()) return fail(kExitInvalidInput, "address: " + hp.status().message());
  nlohmann::json params = nlohmann::json::object();
  if (!params_text.empty()) {
    params = nlohmann::json::parse(params_text, nullptr, false);
    if (!params.is_object()) return fail(kExitInvalidInput, "params: not a JSON object");
  }
  net::NetOptions no;
  no.tls = tls;
  auto c = net::ControlClient::Connect(hp->first, hp->second, secret.value(), no, "control");
  // A bad TLS file is the input's fault (2); a peer that cannot be reached is not (4).
  if (!c.ok()) return fail(PeerExitCode(c.status()), address + ": " + c.status().ToString());
  bool transport_error = false;
  auto r = c.value()->Call(method, params, std::chrono::milliseconds(timeout_ms), &transport_error);
  if (!r.ok()) {
    std::cout << net::StatusToJson(r.status()).dump() << "\n";
    if (transport_error) return fail(kExitUnreachable, address + ": " + r.status().ToString());
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
  cmd->add_option("address", *address, "HOST:PORT")->required();
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
