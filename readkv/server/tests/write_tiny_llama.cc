// Test fixture tool: writes the tiny random Llama of tiny_llama.h (calibrated) into a directory,
// for tests that start `kvgate serve --model DIR` from outside C++ (the openai npm client test).
#include <exception>
#include <filesystem>
#include <iostream>

#include "tiny_llama.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: readkv_write_tiny_llama DIR\n";
    return 2;
  }
  try {
    std::filesystem::create_directories(argv[1]);
    readkv::server::testing::WriteTinyLlama(argv[1], /*calibrate=*/true);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
