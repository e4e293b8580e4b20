// Test hooks of TcpRankAgent (include/wtx/tcp_rank_agent.h). Not part of the public API:
// the multi-process fault tests (`wtx rank --test-hooks`) and tests/net start their agents
// through StartRankAgentWithHooks; TcpRankAgent::Start is it with no hooks.
//
// Thread-safety: the hooks may be changed from any thread while the agent runs.
#pragma once

#include <atomic>
#include <memory>

#include "wtx/tcp_rank_agent.h"

namespace wtx {

struct RankAgentHooks {
  // While set, prepare requests are never answered (the coordinator times out); decisions
  // still reach the participant.
  std::atomic<bool> silent{false};
};

// `hooks` (not owned; may be null) must outlive the agent.
Result<std::unique_ptr<TcpRankAgent>> StartRankAgentWithHooks(const RankAgentOptions& options,
                                                              Participant* participant,
                                                              RankAgentHooks* hooks);

}  // namespace wtx
