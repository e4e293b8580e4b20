// Compatibility header: TcpRankAgent and its options are declared in wtx/tcp_rank_agent.h.
// Include that header; this one only forwards to it for code written against older releases.
#pragma once

#include "wtx/tcp_rank_agent.h"
