#include "readkv/model/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "readkv/model/errors.h"

namespace readkv::model {
namespace {

std::string FieldOf(const std::string& text) {
  try {
    ModelConfig::FromJson(text);
  } catch (const ModelFormatError& e) {
    return e.what_failed();
  }
  return "<no error>";
}

TEST(ModelConfigTest, ReadsAHuggingFaceLlamaConfig) {
  const std::string text = R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
    "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5, "max_position_embeddings": 8192, "bos_token_id": 1,
    "eos_token_id": 2, "torch_dtype": "bfloat16", "hidden_act": "silu", "rope_scaling": null,
    "tie_word_embeddings": false})";
  const ModelConfig c = ModelConfig::FromJson(text);
  EXPECT_EQ(c.head_dim, 128);  // derived: hidden / heads
  EXPECT_EQ(c.group_size(), 4);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(ModelConfigTest, ToJsonRoundTrips) {
  ModelConfig c;
  c.rope_theta = 12345.5;
  const ModelConfig back = ModelConfig::FromJson(c.ToJson());
  EXPECT_EQ(back.ToJson(), c.ToJson());
  EXPECT_EQ(back.max_position_embeddings, c.max_position_embeddings);
}

TEST(ModelConfigTest, ErrorsNameTheField) {
  nlohmann::json j = nlohmann::json::parse(ModelConfig().ToJson());
  auto without = [&](const char* key) {
    nlohmann::json k = j;
    k.erase(key);
    return FieldOf(k.dump());
  };
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json k = j;
    k[key] = v;
    return FieldOf(k.dump());
  };
  EXPECT_EQ(without("hidden_size"), "hidden_size");
  EXPECT_EQ(with("hidden_size", "256"), "hidden_size");
  EXPECT_EQ(with("num_key_value_heads", 3), "num_key_value_heads");
  EXPECT_EQ(with("rope_scaling", {{"type", "linear"}}), "rope_scaling");
  EXPECT_EQ(with("model_type", "gpt2"), "model_type");
  EXPECT_EQ(with("torch_dtype", "int8"), "torch_dtype");
  EXPECT_EQ(with("eos_token_id", 999), "eos_token_id");
  EXPECT_EQ(FieldOf("[1, 2]"), "config.json");
  EXPECT_EQ(FieldOf("{oops"), "config.json");
}

}  // namespace
}  // namespace readkv::model
