// `kvgate bench attention`'s tile reader (issue 37): its input set, the point's tokens appended on
// the device by TileAppend (attention_bench_sets.h), with --outlier-cap its outlier page blocks
// built on the host, and its row: the ledgers from one untimed launch's depths (tile_ledgers.h),
// then the timed launch. Nothing here without nvcc.
#include "attention_bench_sets.h"

#if defined(KVGATE_HAVE_CUDA)
#include <algorithm>
#include <stdexcept>

#include "bench_kernels.h"
#include "readkv/codec/calibration.h"
#include "readkv/codec/codebook.h"
#include "readkv/codec/outliers.h"
#include "readkv/codec/transform.h"
#include "readkv/cuda/codec_tables.h"
#include "readkv/cuda/tile_ledgers.h"
#include "tile_pages.h"

namespace readkv::cuda::bench {
namespace {

// The outlier lists of the point's tokens: every token's K and V as TileAppend reads them
// (ForEachTokenChunk), transformed and standardised on the host exactly as the codec's encoder
// (ReadKvLayerCache::EncodeToken: (x - mu) / sigma in float) with the tile set's calibration and
// transform seeds, into one OutlierStore per (sequence, KV head), relaid into page blocks under
// the point's page table. Host work: two FWHTs of d per token and KV head.
TileOutlierPages ListsFromPages(const PointGeometry& g, const DenseSet& dense,
                                const codec::Calibration& cal, int store_bits, int cap) {
  const DecodeShape& s = g.shape;
  const int d = s.head_dim, hkv = s.heads_kv;
  const size_t hd = static_cast<size_t>(hkv) * d;
  const codec::LloydTree tree(store_bits);
  const codec::OutlierOptions options = codec::ResolveOutlierOptions({cap, 0.0f}, tree, d);
  const std::vector<float>& k_mean = cal.key_mean;  // layer 0's [H_kv][d]: the only layer
  const std::vector<float>& k_std = cal.key_std;
  const std::vector<float>& v_mean = cal.value_mean;
  const std::vector<float>& v_std = cal.value_std;
  const codec::TransformSeeds seeds;  // MakeReadKvHostTables' (BuildTile): layer 0
  std::vector<codec::HadamardTransform> kt, vt;
  for (int h = 0; h < hkv; ++h) {
    kt.emplace_back(d, seeds.KeySeed(0, h));
    vt.emplace_back(d, seeds.ValueSeed(0, h));
  }
  std::vector<codec::OutlierStore> stores(static_cast<size_t>(s.batch) * hkv,
                                          codec::OutlierStore(d, options));
  std::vector<int32_t> seq_of;  // sequence of each of the point's tokens, in gather order
  for (int b = 0; b < s.batch; ++b) {
    seq_of.insert(seq_of.end(), static_cast<size_t>(g.seq_lens[static_cast<size_t>(b)]), b);
  }
  std::vector<float> keys, values, x(static_cast<size_t>(d)), kz(x.size()), vz(x.size());
  const auto standardise = [&](const codec::HadamardTransform& t, const float* in,
                               const std::vector<float>& mean, const std::vector<float>& sd,
                               size_t head, std::vector<float>& z) {
    t.Forward(std::span<const float>(in, x.size()), x);
    for (size_t ch = 0; ch < x.size(); ++ch) z[ch] = (x[ch] - mean[head + ch]) / sd[head + ch];
  };
  ForEachTokenChunk(g, dense, [&](const TokenChunk& c) {
    keys.resize(static_cast<size_t>(c.n) * hd);
    values.resize(keys.size());
    Check(cudaMemcpy(keys.data(), c.keys, keys.size() * sizeof(float), cudaMemcpyDeviceToHost),
          "tile set: download gathered keys");
    Check(cudaMemcpy(values.data(), c.values, values.size() * sizeof(float),
                     cudaMemcpyDeviceToHost),
          "tile set: download gathered values");
    for (int j = 0; j < c.n; ++j) {
      const auto b = static_cast<size_t>(seq_of[static_cast<size_t>(c.begin + j)]);
      for (int h = 0; h < hkv; ++h) {
        const size_t row = static_cast<size_t>(j) * hd + static_cast<size_t>(h) * d;
        const size_t head = static_cast<size_t>(h) * d;
        standardise(kt[static_cast<size_t>(h)], keys.data() + row, k_mean, k_std, head, kz);
        standardise(vt[static_cast<size_t>(h)], values.data() + row, v_mean, v_std, head, vz);
        stores[b * hkv + static_cast<size_t>(h)].AppendToken(kz, vz);
      }
    }
  });
  std::vector<const codec::OutlierStore*> rows;
  for (const auto& store : stores) rows.push_back(&store);
  return BuildTileOutlierPages(rows, g.seq_lens, hkv, g.page_table, s.max_pages,
                               static_cast<int>(g.num_pages));
}

}  // namespace

void BuildTile(TileSet& tile, const PointGeometry& g, const DenseSet& dense,
               const codec::Calibration& calibration, const float* queries,
               const BenchConfig& config, int sm_count, int64_t l2_bytes,
               std::ostream* progress) {
  const DecodeShape& s = g.shape;
  const int w = tile.store_bits;
  const int outlier_cap = config.outlier_cap;
  tile.shape = TileDecodeShape{s.batch, s.heads_q, s.heads_kv, s.head_dim,
                               w,       s.max_tokens, 0,      s.max_pages};
  tile.shape.byte_keys = tile.byte_keys;  // PlanTileDecode refuses them unless W = 8
  tile.plan = PlanTileDecode(tile.shape, sm_count, config.value_window);
  if (config.chunk_tokens > 0 && config.value_window == 0) {  // --chunk-tokens, checked
    tile.plan.chunk_tokens = config.chunk_tokens;
    tile.plan.chunks =
        static_cast<int>((s.max_tokens + config.chunk_tokens - 1) / config.chunk_tokens);
  }
  // kAuto is kvgate serve's choice; forced on is checked by the workspace's layout.
  Check(ApplyOnePassMode(config.one_pass, tile.shape, &tile.plan), "ChooseTileOnePass");
  const codec::LloydTree tree(w);
  tile.centroids = tile::MakeTileCentroids(tree);
  tile.encoded_lens = g.seq_lens;
  tile.residual_lens.assign(g.seq_lens.size(), 0);
  tile.has_lists = outlier_cap > 0;
  if (tile.has_lists) {
    tile.lists = ListsFromPages(g, dense, calibration, w, outlier_cap);
  }
  // The codec's signs, boundaries and step-1 increments (t_min 1, step 1: W - 1 steps), layer 0.
  const ReadKvHostTables tables =
      MakeReadKvHostTables(codec::TransformSeeds{}, 1, s.heads_kv, s.head_dim, w);

  const size_t hd = static_cast<size_t>(s.heads_kv) * s.head_dim;
  // The pools hold the point's pages (g.num_pages), each page 16 tiles per KV head.
  const size_t tile_bytes = static_cast<size_t>(g.num_pages) * s.heads_kv *
                            static_cast<size_t>(tile::PageHeadBytes(s.head_dim, w));
  const size_t query_bytes = static_cast<size_t>(s.batch) * s.heads_q * s.head_dim * sizeof(float);
  tile.queries = tile.set.Add(query_bytes);
  tile.encoded = tile.set.Add(tile.encoded_lens.size() * sizeof(int32_t));
  tile.residual = tile.set.Add(tile.residual_lens.size() * sizeof(int32_t));
  tile.key_tiles = tile.set.Add(tile_bytes);
  tile.value_tiles = tile.set.Add(tile_bytes);
  tile.page_table = tile.set.Add(g.page_table.size() * sizeof(int32_t));
  tile.tables.Reserve(tile.set, hd);
  // Both of the tile reader's allocators take the step-1 table (tile_attention.h).
  const std::vector<double>& increments = tables.key_increments;
  tile.increments = tile.set.Add(increments.size() * sizeof(double));
  if (tile.has_lists) {
    tile.key_outlier_pages = tile.set.Add(tile.lists.key_blocks.size() * sizeof(uint32_t));
    tile.value_outlier_pages = tile.set.Add(tile.lists.value_blocks.size() * sizeof(uint32_t));
  }
  tile.capacity_bytes = TileCapacityBytes(tile.shape, tile.encoded_lens.data(),
                                          tile.residual_lens.data(), tile.Lists());
  tile.set.Allocate(l2_bytes, "tile:" + std::to_string(w) + " set");
  if (tile.has_lists) {
    UploadTo(tile.set.At<uint32_t>(0, tile.key_outlier_pages), tile.lists.key_blocks,
             "key outlier pages");
    UploadTo(tile.set.At<uint32_t>(0, tile.value_outlier_pages), tile.lists.value_blocks,
             "value outlier pages");
  }

  Check(cudaMemcpy(tile.set.At<float>(0, tile.queries), queries, query_bytes,
                   cudaMemcpyDeviceToDevice),
        "tile set: copy queries");
  UploadTo(tile.set.At<int32_t>(0, tile.page_table), g.page_table, "tile page table");
  UploadTo(tile.set.At<int32_t>(0, tile.encoded), tile.encoded_lens, "tile encoded_lens");
  UploadTo(tile.set.At<int32_t>(0, tile.residual), tile.residual_lens, "tile residual_lens");
  UploadTo(tile.set.At<float>(0, tile.tables.key_mean), calibration.key_mean, "key_mean");
  UploadTo(tile.set.At<float>(0, tile.tables.key_std), calibration.key_std, "key_std");
  UploadTo(tile.set.At<float>(0, tile.tables.value_mean), calibration.value_mean, "value_mean");
  UploadTo(tile.set.At<float>(0, tile.tables.value_std), calibration.value_std, "value_std");
  UploadTo(tile.set.At<float>(0, tile.tables.key_signs), tables.key_signs, "key_signs");
  UploadTo(tile.set.At<float>(0, tile.tables.value_signs), tables.value_signs, "value_signs");
  UploadTo(tile.set.At<double>(0, tile.increments), increments, "step-1 increments");

  // Every token through the tile pools' own writer, TileAppend (the codec's codes bit for bit:
  // tests/tile_append_test.cc), into zeroed pools; its boundaries only for the encode.
  Check(cudaMemset(tile.set.At<uint8_t>(0, tile.key_tiles), 0, tile_bytes),
        "tile set: zero the key pool");
  Check(cudaMemset(tile.set.At<uint8_t>(0, tile.value_tiles), 0, tile_bytes),
        "tile set: zero the value pool");
  const DeviceBuffer boundaries = Upload(tables.boundaries, "tile set: boundaries");
  ReadKvCodec codec = tile.Codec(0);
  codec.boundaries = boundaries.as<const float>();
  TileCache cache{tile.set.At<uint8_t>(0, tile.key_tiles),
                  tile.set.At<uint8_t>(0, tile.value_tiles)};
  cache.byte_keys = tile.byte_keys;
  const int32_t* table = tile.set.At<const int32_t>(0, tile.page_table);
  ForEachTokenChunk(g, dense, [&](const TokenChunk& c) {
    Check(TileAppend(s, c.n, c.keys, c.values, c.seq_ids, c.positions, table, codec, cache, 0),
          "tile set: TileAppend");
  });
  Check(cudaDeviceSynchronize(), "tile set: TileAppend (synchronise)");
  if (progress != nullptr) {
    *progress << "  tile W=" << w << (tile.byte_keys ? " byte keys" : "") << ": "
              << g.context_tokens << " tokens appended (TileAppend), " << tile_bytes / kMiB
              << " MiB of key tiles; calibrated on " << calibration.samples_per_head
              << "; chunks of " << tile.plan.chunk_tokens << " tokens (" << tile.plan.chunks
              << " a row"
              << (tile.plan.value_window_tokens > 0 ? ", each its own Value window" : "")
              << (tile.plan.one_pass ? "; one pass, a row a cluster" : "") << ")\n";
    if (tile.has_lists) {
      int64_t keys = 0, values = 0;
      for (int b = 0; b < s.batch; ++b) {
        const int64_t tiles = (g.seq_lens[static_cast<size_t>(b)] + 15) / 16;
        for (int h = 0; h < s.heads_kv; ++h) {
          keys += tile.lists.Entries(true, b, h, tiles);
          values += tile.lists.Entries(false, b, h, tiles);
        }
      }
      *progress << "  tile W=" << w << ": outlier page blocks (cap " << outlier_cap << "): "
                << keys << " key and " << values << " value entries\n";
    }
  }
}

std::function<void(int)> TileRow(const TileSet& tile, const KvSpec& spec, float* out,
                                 size_t out_elems, void* workspace, BenchRow& row,
                                 std::vector<float>& output) {
  const TileDecodeShape& s = tile.shape;
  const std::string name = spec.Name();
  const size_t rows = static_cast<size_t>(s.batch) * static_cast<size_t>(s.heads_kv);
  const size_t key_n = rows * static_cast<size_t>(s.groups());
  const size_t value_n = rows * static_cast<size_t>(s.max_token_tiles());
  const DeviceBuffer key_depths(key_n, name + " key group depths");
  const DeviceBuffer value_depths(value_n, name + " value block depths");
  TileDecodeDebug debug;
  debug.key_depths = key_depths.as<uint8_t>();
  debug.value_depths = value_depths.as<uint8_t>();
  Check(cudaMemset(out, 0xFF, out_elems * sizeof(float)), "poison output");
  Check(TileDecodeAttention(s, tile.Inputs(0, out), tile.Codec(0), tile.centroids,
                            tile.Policy(0, spec), tile.plan, workspace, 0, debug),
        "TileDecodeAttention (" + name + ", depths launch)");
  Check(cudaDeviceSynchronize(), "TileDecodeAttention (" + name + ", depths launch: execution)");
  output = Download(out, out_elems, "download " + name + " output");
  std::vector<uint8_t> kd(key_n), vd(value_n);
  Check(cudaMemcpy(kd.data(), key_depths.as<void>(), key_n, cudaMemcpyDeviceToHost),
        "download " + name + " key group depths");
  Check(cudaMemcpy(vd.data(), value_depths.as<void>(), value_n, cudaMemcpyDeviceToHost),
        "download " + name + " value block depths");
  const int32_t* encoded = tile.encoded_lens.data();
  row.logical_bytes = TileLogicalBytes(s, encoded, kd.data(), vd.data(), tile.Lists());
  row.traffic = TileDecodeTraffic(s, tile.plan, encoded, tile.residual_lens.data(), kd.data(),
                                  vd.data(), tile.Lists());
  row.copies = tile.set.copies();
  row.copy_bytes = static_cast<int64_t>(tile.set.copy_bytes());
  row.capacity_bytes = tile.capacity_bytes;
  row.workspace_bytes = static_cast<int64_t>(TileDecodeWorkspaceBytes(s, tile.plan));
  row.chunk_tokens = tile.plan.chunk_tokens;
  row.value_window_tokens = tile.plan.value_window_tokens;
  row.one_pass = tile.plan.one_pass;
  if (TileOnePassAllowed(s, tile.plan)) {  // whether its clusters fit the device at once
    TilePlan one_pass = tile.plan;
    one_pass.one_pass = true;
    int clusters = 0;
    Check(TileOnePassResidentClusters(s, one_pass, &clusters),
          "TileOnePassResidentClusters (" + name + ")");
    row.resident_clusters = clusters;
    row.clusters = s.batch * s.heads_kv;
  }
  const std::string timed = "TileDecodeAttention (" + name + ", timed launch)";
  return [&tile, spec, out, workspace, timed](int k) {
    Check(TileDecodeAttention(tile.shape, tile.Inputs(k, out), tile.Codec(k), tile.centroids,
                              tile.Policy(k, spec), tile.plan, workspace, 0),
          timed);
  };
}

PhaseTimes TilePhases(const TileSet& tile, const KvSpec& spec, float* out, void* workspace,
                      int first_copy, int64_t spin_ns) {
  const TileDecodeShape& s = tile.shape;
  const std::string name = spec.Name();
  const size_t blocks = static_cast<size_t>(tile.plan.chunks) * s.heads_kv * s.batch;
  const DeviceBuffer stamps(blocks * sizeof(TilePhaseClocks), name + " phase clocks");
  std::vector<TilePhaseClocks> clocks(kPhaseLaunches * blocks);
  TileDecodeDebug debug;
  debug.phases = stamps.as<TilePhaseClocks>();
  for (int l = 0; l < kPhaseLaunches; ++l) {
    const int k = (first_copy + l) % tile.set.copies();
    Check(cudaMemset(debug.phases, 0, stamps.bytes()), "clear " + name + " phase clocks");
    Check(Spin(spin_ns, 0), "spin");
    Check(TileDecodeAttention(s, tile.Inputs(k, out), tile.Codec(k), tile.centroids,
                              tile.Policy(k, spec), tile.plan, workspace, 0, debug),
          "TileDecodeAttention (" + name + ", phases launch)");
    Check(cudaMemcpy(clocks.data() + l * blocks, debug.phases, stamps.bytes(),
                     cudaMemcpyDeviceToHost),
          "download " + name + " phase clocks");
  }
  return SummarisePhases(clocks, kPhaseLaunches);
}

}  // namespace readkv::cuda::bench

#endif  // KVGATE_HAVE_CUDA
