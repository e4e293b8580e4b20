// `wtx control HOST:PORT --secret-file F METHOD [PARAMS_JSON]`
//
// One authenticated control call to a `wtx coordinator` (its --listen port) or a `wtx rank`
// (its --control port), printing the JSON answer (src/net/control_service.h lists the methods).
// Exit 0 on an answer, 1 when the process answered with an error, 2 on a usage or connection
// failure. Example: wtx control 127.0.0.1:7070 --secret-file s begin
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
  auto secret = net::ReadSecretFile(secret_file);
  if (!secret.ok()) {
    std::cerr << "wtx control: " << secret.status().message() << "\n";
    return 2;
  }
  auto hp = net::ParseHostPort(address);
  if (!hp.ok()) {
    std::cerr << "wtx control: " << hp.status().message() << "\n";
    return 2;
  }
  nlohmann::json params = nlohmann::json::object();
  if (!params_text.empty()) {
    params = nlohmann::json::parse(params_text, nullptr, false);
    if (!params.is_object()) {
      std::cerr << "wtx control: PARAMS must be a JSON object\n";
      return 2;
    }
  }
  net::NetOptions no;
  no.tls = tls;
  auto c = net::ControlClient::Connect(hp->first, hp->second, secret.value(), no, "control");
  if (!c.ok()) {
    std::cerr << "wtx control: " << c.status().ToString() << "\n";
    return 2;
  }
  auto r = c.value()->Call(method, params, std::chrono::milliseconds(timeout_ms));
  if (!r.ok()) {
    std::cout << net::StatusToJson(r.status()).dump() << "\n";
    return 1;
  }
  std::cout << r.value().dump() << "\n";
  return 0;
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
  cmd->add_option("--timeout-ms", *timeout, "How long to wait for the answer")
      ->check(TimeoutMsRange())
      ->capture_default_str();
  auto a = std::make_shared<ControlTls>();
  AddTlsOptions(cmd, &a->tls);
  cmd->callback(
      [=] { *exit_code = RunControl(*address, *secret, *method, *params, *timeout, a->tls); });
}

}  // namespace wtx::cli
