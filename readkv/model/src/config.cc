#include "readkv/model/config.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "readkv/model/errors.h"

namespace readkv::model {
namespace {

using nlohmann::json;

template <typename T>
T Required(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) throw ModelFormatError(key, "missing from config.json");
  try {
    if constexpr (std::is_same_v<T, int>) {
      if (!it->is_number_integer()) throw ModelFormatError(key, "must be an integer");
    } else if constexpr (std::is_same_v<T, double>) {
      if (!it->is_number()) throw ModelFormatError(key, "must be a number");
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw ModelFormatError(key, "must be a boolean");
    } else {
      if (!it->is_string()) throw ModelFormatError(key, "must be a string");
    }
    return it->get<T>();
  } catch (const json::exception& e) {
    throw ModelFormatError(key, e.what());
  }
}

template <typename T>
T Optional(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return Required<T>(j, key);
}

}  // namespace

void ModelConfig::Validate() const {
  auto positive = [](const char* field, long long v) {
    if (v <= 0) throw ModelFormatError(field, "must be positive, got " + std::to_string(v));
  };
  if (model_type != "llama") {
    throw ModelFormatError("model_type", "only \"llama\" is supported, got \"" + model_type + "\"");
  }
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  if (num_attention_heads % num_key_value_heads != 0) {
    throw ModelFormatError("num_key_value_heads", "must divide num_attention_heads");
  }
  if (head_dim % 2 != 0) throw ModelFormatError("head_dim", "must be even (RoPE pairs)");
  if (!(rope_theta > 0.0)) throw ModelFormatError("rope_theta", "must be positive");
  if (!(rms_norm_eps > 0.0)) throw ModelFormatError("rms_norm_eps", "must be positive");
  if (bos_token_id < 0 || bos_token_id >= vocab_size) {
    throw ModelFormatError("bos_token_id", "outside the vocabulary");
  }
  if (eos_token_id < 0 || eos_token_id >= vocab_size) {
    throw ModelFormatError("eos_token_id", "outside the vocabulary");
  }
  if (torch_dtype != "float32" && torch_dtype != "bfloat16" && torch_dtype != "float16") {
    throw ModelFormatError("torch_dtype",
                           "must be float32, bfloat16 or float16, got \"" + torch_dtype + "\"");
  }
}

ModelConfig ModelConfig::FromJson(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw ModelFormatError("config.json", std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ModelFormatError("config.json", "must be a JSON object");
  ModelConfig c;
  c.model_id = Optional<std::string>(j, "_name_or_path", c.model_id);
  c.model_type = Required<std::string>(j, "model_type");
  c.vocab_size = Required<int>(j, "vocab_size");
  c.hidden_size = Required<int>(j, "hidden_size");
  c.intermediate_size = Required<int>(j, "intermediate_size");
  c.num_hidden_layers = Required<int>(j, "num_hidden_layers");
  c.num_attention_heads = Required<int>(j, "num_attention_heads");
  c.num_key_value_heads = Optional<int>(j, "num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads <= 0) throw ModelFormatError("num_attention_heads", "must be positive");
  c.head_dim = Optional<int>(j, "head_dim", c.hidden_size / c.num_attention_heads);
  c.rope_theta = Optional<double>(j, "rope_theta", 10000.0);
  c.rms_norm_eps = Optional<double>(j, "rms_norm_eps", 1e-6);
  c.max_position_embeddings = Required<int>(j, "max_position_embeddings");
  c.tie_word_embeddings = Optional<bool>(j, "tie_word_embeddings", false);
  c.bos_token_id = Required<int>(j, "bos_token_id");
  c.eos_token_id = Required<int>(j, "eos_token_id");
  c.torch_dtype = Optional<std::string>(j, "torch_dtype", "float32");
  c.tokenizer = Optional<std::string>(j, "kvgate_tokenizer", "byte");
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    throw ModelFormatError("rope_scaling", "RoPE scaling is not implemented (must be null)");
  }
  if (auto it = j.find("hidden_act"); it != j.end() && *it != "silu") {
    throw ModelFormatError("hidden_act", "only \"silu\" (SwiGLU) is supported");
  }
  if (auto it = j.find("attention_bias"); it != j.end() && *it != false) {
    throw ModelFormatError("attention_bias", "attention biases are not supported");
  }
  if (auto it = j.find("mlp_bias"); it != j.end() && *it != false) {
    throw ModelFormatError("mlp_bias", "MLP biases are not supported");
  }
  c.Validate();
  return c;
}

ModelConfig ModelConfig::Load(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFormatError("config.json", "cannot open " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return FromJson(buffer.str());
}

std::string ModelConfig::ToJson() const {
  json j = json::object();
  j["_name_or_path"] = model_id;
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = nullptr;
  j["rms_norm_eps"] = rms_norm_eps;
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_token_id;
  j["torch_dtype"] = torch_dtype;
  j["kvgate_tokenizer"] = tokenizer;
  return j.dump(2) + "\n";
}

}  // namespace readkv::model
