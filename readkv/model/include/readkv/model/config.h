// The architecture of a Llama-family decoder, read from a Hugging Face `config.json`
// (LlamaConfig field names). Plain data; validated on parse.
#pragma once

#include <cstdint>
#include <string>

namespace readkv::model {

struct ModelConfig {
  std::string model_id = "kvgate/recall-byte-3m";  // "_name_or_path" in config.json
  std::string model_type = "llama";
  int vocab_size = 258;
  int hidden_size = 256;
  int intermediate_size = 768;
  int num_hidden_layers = 4;
  int num_attention_heads = 4;
  int num_key_value_heads = 2;
  int head_dim = 64;  // hidden_size / num_attention_heads when absent from the file
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  int max_position_embeddings = 8704;  // the longest context the model was trained on
  bool tie_word_embeddings = false;
  int bos_token_id = 256;
  int eos_token_id = 257;
  std::string torch_dtype = "bfloat16";  // dtype of every tensor in model.safetensors
  std::string tokenizer = "byte";        // "kvgate_tokenizer": only "byte" exists so far

  // Query heads per KV head (GQA group size).
  int group_size() const { return num_attention_heads / num_key_value_heads; }

  // Throws ModelFormatError naming the field for any missing, mistyped or inconsistent value
  // (only "rope_scaling": null is accepted; other RoPE variants are not implemented).
  static ModelConfig FromJson(const std::string& text);
  // Reads `<dir>/config.json`.
  static ModelConfig Load(const std::string& model_dir);
  // Hugging Face-compatible JSON (architectures = LlamaForCausalLM), pretty-printed.
  std::string ToJson() const;
  // Throws ModelFormatError naming the first inconsistent field.
  void Validate() const;
};

}  // namespace readkv::model
