#include "tools/wtx/decision_log_flags.h"

#include "tools/wtx/commands.h"

namespace wtx::cli {

void AddDecisionLogFlags(CLI::App* cmd, DecisionLogFlags* flags) {
  cmd->add_option("--decision-log", flags->url,
                  "Shared decision log etcd://HOST:PORT[,HOST:PORT...]/PREFIX (default: the "
                  "embedded journal)")
      ->check(
          [](const std::string& url) -> std::string {
            // An empty value is most likely an unset variable ($ETCD_URL): silently deciding
            // in the embedded journal instead would split the decisions. Omit the flag for it.
            return url.empty() ? "is empty (an unset variable?); omit --decision-log for the "
                                 "embedded journal"
                               : "";
          },
          "etcd URL");
  cmd->add_option("--etcd-ca", flags->tls.ca,
                  "PEM CA the etcd members' certificates must chain to (HTTPS to etcd)");
  cmd->add_option("--etcd-cert", flags->tls.cert,
                  "PEM client certificate presented to etcd (with --etcd-key, --etcd-ca)");
  cmd->add_option("--etcd-key", flags->tls.key, "PEM private key of --etcd-cert");
  AddIntOption(cmd, "--decision-log-timeout-ms", &flags->timeout_ms, kTimeoutMsBounds,
               "Deadline of one request to one etcd member (then the next member is tried)")
      ->capture_default_str();
}

Status CheckEtcdTlsFlags(const TlsFiles& tls) {
  if (tls.cert.empty() != tls.key.empty() || (!tls.cert.empty() && tls.ca.empty())) {
    return Status::InvalidArgument(
        "give --etcd-cert and --etcd-key together, and with --etcd-ca (client certificates)");
  }
  for (const auto& [flag, path] :
       {std::pair<std::string_view, const std::string&>{"--etcd-ca", tls.ca},
        {"--etcd-cert", tls.cert},
        {"--etcd-key", tls.key}}) {
    if (!path.empty()) WTX_RETURN_IF_ERROR(ReadFileArg(flag, path).status());
  }
  return Status::OK();
}

Result<FleetOptions> FleetOptionsFromFlags(const DecisionLogFlags& flags, const std::string& url,
                                           const std::string& fleet) {
  WTX_RETURN_IF_ERROR(CheckEtcdTlsFlags(flags.tls));
  FleetOptions o;
  o.url = url;
  o.tls = flags.tls;
  o.request_timeout = std::chrono::milliseconds(flags.timeout_ms);
  o.fleet = fleet;
  return o;
}

Result<std::shared_ptr<DecisionLog>> OpenDecisionLogFlags(const DecisionLogFlags& flags,
                                                          bool create) {
  const bool any_tls = !flags.tls.ca.empty() || !flags.tls.cert.empty() || !flags.tls.key.empty();
  if (flags.url.empty()) {
    if (any_tls) {
      return Status::InvalidArgument(
          "--etcd-ca/--etcd-cert/--etcd-key need --decision-log etcd://...");
    }
    return std::shared_ptr<DecisionLog>();
  }
  WTX_RETURN_IF_ERROR(CheckEtcdTlsFlags(flags.tls));
  DecisionLogOptions o;
  o.url = flags.url;
  o.tls = flags.tls;
  o.request_timeout = std::chrono::milliseconds(flags.timeout_ms);
  o.create = create;
  auto log = OpenDecisionLog(o);
  if (!log.ok()) {
    return Status(log.status().code(),
                  "--decision-log '" + flags.url + "': " + log.status().message());
  }
  return log;
}

}  // namespace wtx::cli
