// `kvgate bench attention`'s tile reader (issue 37): its input set, relaid on the device from the
// ReadKV set of the same W (attention_bench_sets.h), and its row: the ledgers from one untimed
// launch's depths (tile_ledgers.h), then the timed launch. Nothing here without nvcc.
#include "attention_bench_sets.h"

#if defined(KVGATE_HAVE_CUDA)
#include <algorithm>
#include <stdexcept>

#include "bench_kernels.h"
#include "readkv/codec/codebook.h"
#include "readkv/cuda/tile_ledgers.h"

namespace readkv::cuda::bench {
namespace {

void CopyTable(const TileSet& tile, size_t to, const ReadKvSet& source, size_t from, size_t bytes,
               const std::string& what) {
  Check(cudaMemcpy(tile.set.At<char>(0, to), source.set.At<const char>(0, from), bytes,
                   cudaMemcpyDeviceToDevice),
        "tile set: copy " + what + " from the readkv set");
}

}  // namespace

void BuildTile(TileSet& tile, const PointGeometry& g, const ReadKvSet& source, int sm_count,
               int64_t l2_bytes, std::ostream* progress) {
  const DecodeShape& s = g.shape;
  const int w = source.store_bits;
  tile.store_bits = w;
  tile.shape = TileDecodeShape{s.batch, s.heads_q, s.heads_kv, s.head_dim, w, s.max_tokens, 0};
  tile.plan = PlanTileDecode(tile.shape, sm_count);
  const codec::LloydTree tree(w);
  tile.centroids = tile::MakeTileCentroids(tree);
  tile.encoded_lens = g.seq_lens;
  tile.residual_lens.assign(g.seq_lens.size(), 0);

  const size_t hd = static_cast<size_t>(s.heads_kv) * s.head_dim;
  const size_t tile_bytes = static_cast<size_t>(s.batch) * s.heads_kv *
                            static_cast<size_t>(tile.shape.max_token_tiles()) *
                            static_cast<size_t>(tile.shape.groups()) * w * 32;
  const size_t query_bytes = static_cast<size_t>(s.batch) * s.heads_q * s.head_dim * sizeof(float);
  tile.queries = tile.set.Add(query_bytes);
  tile.encoded = tile.set.Add(tile.encoded_lens.size() * sizeof(int32_t));
  tile.residual = tile.set.Add(tile.residual_lens.size() * sizeof(int32_t));
  tile.key_tiles = tile.set.Add(tile_bytes);
  tile.value_tiles = tile.set.Add(tile_bytes);
  tile.tables.Reserve(tile.set, hd);
  // Both of the tile reader's allocators take the step-1 table (tile_attention.h): the
  // constrained reader's Key table (MakeReadKvHostTables: t_min 1, step 1, never empty).
  const size_t increment_bytes =
      static_cast<size_t>(std::max(source.key_steps, 1)) * sizeof(double);
  tile.increments = tile.set.Add(increment_bytes);
  tile.capacity_bytes = TileCapacityBytes(tile.shape, tile.encoded_lens.data(),
                                          tile.residual_lens.data());
  tile.set.Allocate(l2_bytes, "tile:" + std::to_string(w) + " set");

  CopyTable(tile, tile.queries, source, source.common.queries, query_bytes, "queries");
  UploadTo(tile.set.At<int32_t>(0, tile.encoded), tile.encoded_lens, "tile encoded_lens");
  UploadTo(tile.set.At<int32_t>(0, tile.residual), tile.residual_lens, "tile residual_lens");
  CopyTable(tile, tile.tables.key_mean, source, source.tables.key_mean, tile.tables.bytes,
            "calibration and signs");
  CopyTable(tile, tile.increments, source, source.key_increments, increment_bytes,
            "step-1 increments (its Key table)");

  const PagedPlanes planes{source.set.At<const uint8_t>(0, source.key_planes),
                           source.set.At<const uint8_t>(0, source.value_planes),
                           source.set.At<const int32_t>(0, source.common.page_table),
                           s.heads_kv,
                           s.head_dim,
                           w,
                           s.max_pages};
  Check(PagesToTiles(planes, source.set.At<const int32_t>(0, source.common.seq_lens), s.batch,
                     tile.shape.max_token_tiles(), tile.set.At<uint8_t>(0, tile.key_tiles),
                     tile.set.At<uint8_t>(0, tile.value_tiles), 0),
        "tile set: relayout of the readkv:" + std::to_string(w) + " planes (PagesToTiles)");
  Check(cudaDeviceSynchronize(), "tile set: relayout (PagesToTiles, synchronise)");
  if (progress != nullptr) {
    *progress << "  tile W=" << w << ": " << tile_bytes / kMiB << " MiB of key tiles relaid from "
              << "the readkv planes; chunks of " << tile.plan.chunk_tokens << " tokens ("
              << tile.plan.chunks << " a row)\n";
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
  row.logical_bytes = TileLogicalBytes(s, encoded, kd.data(), vd.data());
  row.traffic =
      TileDecodeTraffic(s, tile.plan, encoded, tile.residual_lens.data(), kd.data(), vd.data());
  row.copies = tile.set.copies();
  row.copy_bytes = static_cast<int64_t>(tile.set.copy_bytes());
  row.capacity_bytes = tile.capacity_bytes;
  row.workspace_bytes = static_cast<int64_t>(TileDecodeWorkspaceBytes(s, tile.plan));
  row.chunk_tokens = tile.plan.chunk_tokens;
  const std::string timed = "TileDecodeAttention (" + name + ", timed launch)";
  return [&tile, spec, out, workspace, timed](int k) {
    Check(TileDecodeAttention(tile.shape, tile.Inputs(k, out), tile.Codec(k), tile.centroids,
                              tile.Policy(k, spec), tile.plan, workspace, 0),
          timed);
  };
}

}  // namespace readkv::cuda::bench

#endif  // KVGATE_HAVE_CUDA
