// readkv_model_tool: the model runtime's commands without the rest of kvgate (train on a GPU
// host that builds only this library; eval and generate for quality work). Exit 2 on usage
// errors, 3 on failures.
#include <CLI/CLI.hpp>

#include <iostream>

#include "readkv/codec/errors.h"
#include "readkv/model/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"readkv_model_tool: train, calibrate, evaluate the kvgate model runtime"};
  app.require_subcommand(1);
  int exit_code = 0;
  readkv::model::AddTrainCommand(app, exit_code);
  readkv::model::AddCalibrateCommand(app, exit_code);
  readkv::model::AddEvalCommand(app, exit_code);
  readkv::model::AddGenerateCommand(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const readkv::codec::InvalidArgument& e) {
    std::cerr << "error: invalid argument " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 3;
  }
  return exit_code;
}
