// kvgate_loadgen_fixture_server: the trivial local endpoint of loadgen/bench/run_bench.sh. Serves
// OpenAI-style completions on 127.0.0.1 (a free port, printed on stdout as "PORT <n>") with the
// requested number of tokens and no delay, until stdin closes or it receives SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include "fixture_server.h"

int main() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // the server thread inherits the mask
  kvgate::loadgen::testing::FixtureServer server;
  std::cout << "PORT " << server.port() << std::endl;
  int received = 0;
  sigwait(&signals, &received);
  std::cerr << "fixture server: " << server.completions_received() << " completions, "
            << server.connections_accepted() << " connections\n";
  return 0;
}
