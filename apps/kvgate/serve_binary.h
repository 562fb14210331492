// kvgate and kvgate-serve: the framework binary (no libtorch, no CUDA) runs the reference
// server's commands by executing kvgate-serve from its own folder, as git runs git-foo.
//
//   kvgate serve|train|calibrate|bench ARGS...  ==  <folder of kvgate>/kvgate-serve <same argv>
//
// The exec replaces the kvgate process (same pid), so exit status, signals and a parent's death
// signal pass straight through; the suite (`kvgate run`) and the failure scenarios start
// `kvgate serve` and never know. When kvgate-serve is not there, the command exits 3 with
// MissingServeMessage (the path it looked for and how to build it).
#pragma once

#include <string>
#include <string_view>

namespace kvgate {

// The running executable (/proc/self/exe); "kvgate" if it cannot be read.
std::string SelfPath();

// Where kvgate-serve must be: beside SelfPath().
std::string ServeBinaryPath();

// "kvgate <command> needs kvgate-serve (...), and it is not at <path>; build it ..." .
std::string MissingServeMessage(std::string_view command, const std::string& path);

// Whether `command` (argv[1]) is one kvgate-serve runs.
bool IsServeCommand(std::string_view command);

// Executes kvgate-serve with argv[1..]; returns only on failure, with exit status 3 after
// printing why (MissingServeMessage when the file is absent).
int ExecServe(int argc, char** argv);

}  // namespace kvgate
