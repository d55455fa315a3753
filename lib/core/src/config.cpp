// TOML -> Job: the rules of docs/workload-format.md. Every accessor goes
// through TableReader (table_reader.hpp), which knows the dotted key of each
// value and the file/line it came from, and remembers which keys were read so
// that anything left over is reported as unknown; --set overrides are applied
// first (toml_overrides.cpp).
#include "pipebench/core/config.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <toml.hpp>

#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/core/device_preset.hpp"
#include "table_reader.hpp"
#include "toml_source.hpp"

namespace pipebench {
namespace {

using toml_source::apply_override;
using toml_source::check_toml_bounds;
using toml_source::format_toml;
using toml_source::integer_literal_fits;
using toml_source::literal;
using toml_source::kMaxTomlBytes;
using toml_source::parse_toml;
using toml_source::read_at_most;
using toml_source::TableReader;
using toml_source::type_name;
using toml_source::Value;
using toml_source::where;


// ---- validation -----------------------------------------------------------

constexpr std::string_view kNameRule = "expected 1 to 100 letters, digits, '_' or '-'";
static_assert(kMaxNameLength == 100, "kNameRule quotes the limit");

// Free text (a description): bounded, no control characters but newline and tab.
void check_free_text(TableReader& r, std::string_view key, const std::string& text) {
  if (text.size() > kMaxDescriptionLength)
    r.fail_key(key, fmt::format("longer than {} bytes", kMaxDescriptionLength));
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f)
      r.fail_key(key, fmt::format("control character \\x{:02x} (only newline and tab are allowed)", u));
  }
}

// The llama block's keys (docs/workload-format.md): grouped-query attention,
// rotary positions, RMSNorm, the SwiGLU width rule; refused for other kinds.
void read_llama_keys(TableReader& r, ModelSpec& m) {
  const bool llama = m.kind == ModelKind::llama;
  for (const char* key : {"kv_heads", "rope_theta", "norm_eps", "multiple_of", "ffn_dim_multiplier"})
    if (!llama && r.find(key))
      r.fail_key(key, fmt::format("a key of the llama block (kind = \"llama\"), not of kind = \"{}\"", to_string(m.kind)));
  if (const Value* t = r.find("tie_embeddings")) {
    if (!t->is_boolean()) r.fail_at(*t, "tie_embeddings", fmt::format("expected a boolean, got {}", type_name(*t)));
    if (t->as_boolean())
      r.fail_at(*t, "tie_embeddings", "tied input and output embeddings are not modelled: the embedding (first stage) and the "
                                      "LM head (last stage) are separate tables, as Megatron-LM's "
                                      "--untie-embeddings-and-output-weights; set false or remove the key");
  }
  if (!llama) return;
  m.kv_heads = r.int_in_range("kv_heads", 1, m.heads, m.heads);
  if (m.heads % m.kv_heads != 0)
    r.fail_key("kv_heads", fmt::format("heads ({}) must be divisible by kv_heads ({})", m.heads, m.kv_heads));
  m.rope_theta = r.number("rope_theta", m.rope_theta, 0.0, false);
  if (m.rope_theta > 1e12) r.fail_key("rope_theta", "expected at most 1e12");
  m.norm_eps = r.number("norm_eps", m.norm_eps, 0.0, false);
  if (m.norm_eps >= 1) r.fail_key("norm_eps", "expected a number below 1");
  const int multiple_of = r.int_in_range("multiple_of", 1, 1 << 16, 256);
  const double multiplier = r.number("ffn_dim_multiplier", 1.0, 0.0, false);
  if (multiplier > 16) r.fail_key("ffn_dim_multiplier", "expected at most 16");
  const std::int64_t f = llama_ffn_hidden(m.hidden, multiplier, multiple_of);
  if (!r.find("ffn_hidden") && (f < 1 || f > kMaxFfnHidden))
    r.fail_key("hidden", fmt::format("the SwiGLU width by Llama's rule, {}, is outside [1, {}]: set ffn_hidden", f, kMaxFfnHidden));
  m.ffn_hidden = r.int_in_range("ffn_hidden", 1, kMaxFfnHidden, static_cast<int>(f));
}

ModelSpec read_model(TableReader& r, std::vector<std::string>& warnings) {
  ModelSpec m;
  m.kind = r.choice<ModelKind>("kind", ModelKind::gpt,
                               {{"gpt", ModelKind::gpt}, {"mlp", ModelKind::mlp}, {"llama", ModelKind::llama}});
  m.hidden = r.int_in_range("hidden", 1, kMaxHidden, std::nullopt);
  m.layers = r.int_in_range("layers", 1, kMaxLayers, std::nullopt);
  if (m.kind != ModelKind::mlp) {
    m.heads = r.int_in_range("heads", 1, kMaxHidden, std::nullopt);
    if (m.hidden % m.heads != 0)
      r.fail_key("heads", fmt::format("hidden ({}) must be divisible by heads ({})", m.hidden, m.heads));
  } else {
    m.heads = 1;
    if (r.find("heads")) warnings.push_back(fmt::format("{}: ignored for kind = \"mlp\"", r.dotted("heads")));
  }
  m.kv_heads = m.heads;
  static_assert(std::int64_t{4} * kMaxHidden <= kMaxFfnHidden, "the default ffn_hidden stays in range");
  read_llama_keys(r, m);
  if (m.kind != ModelKind::llama) m.ffn_hidden = r.int_in_range("ffn_hidden", 1, kMaxFfnHidden, 4 * m.hidden);
  m.seq_len = r.int_in_range("seq_len", 1, kMaxSeqLen, std::nullopt);
  m.vocab = r.int_in_range("vocab", 2, kMaxVocab, std::nullopt);
  m.dtype = r.choice<DType>("dtype", DType::fp32,
                            {{"fp32", DType::fp32}, {"bf16", DType::bf16}, {"fp16", DType::fp16}});
  if (auto s = r.integer("seed")) {
    if (*s < 0) r.fail_key("seed", "expected a non-negative integer");
    m.seed = static_cast<std::uint64_t>(*s);
  }
  m.dropout = r.number("dropout", 0.0, 0.0, true);
  if (m.dropout >= 1.0) r.fail_key("dropout", "expected a rate below 1");
  if (m.dropout > 0.0 && m.kind != ModelKind::gpt)
    r.fail_key("dropout", fmt::format("only kind = \"gpt\" has dropout (Megatron-LM's attention and hidden dropout); kind = \"{}\" "
                          "trains without",
                          to_string(m.kind)));
  if (const Value* a = r.find("attention")) {
    if (m.kind == ModelKind::mlp) r.fail_key("attention", "kind = \"mlp\" has no attention");
    if (a->is_string() && a->as_string() == "mla")
      r.fail_key("attention", "\"mla\" (multi-head latent attention, DeepSeek-V3) is not modelled yet; \"flash\" or "
                              "\"materialized\"");
  }
  // flash unless a workload says otherwise (since issue 69; mlp has none).
  m.attention = r.choice<Attention>("attention", m.kind == ModelKind::mlp ? Attention::materialized : Attention::flash,
                                    {{"materialized", Attention::materialized}, {"flash", Attention::flash}});
  r.reject_unknown_keys();
  return m;
}

TrainSpec read_train(TableReader& r) {
  TrainSpec t;
  t.optimizer = r.choice<OptimizerKind>("optimizer", t.optimizer,
                                        {{"sgd", OptimizerKind::sgd}, {"adamw", OptimizerKind::adamw}});
  t.learning_rate = r.number("learning_rate", t.learning_rate, 0.0, false);
  t.warmup = r.int_in_range("warmup", 0, kMaxSteps, t.warmup);
  t.repeats = r.int_in_range("repeats", 1, kMaxSteps, t.repeats);
  if (t.warmup + t.repeats > kMaxSteps)
    r.fail_at(*r.find(r.find("repeats") ? "repeats" : "warmup"), "repeats",
              fmt::format("warmup + repeats = {} + {} is above the limit of {} steps", t.warmup, t.repeats, kMaxSteps));
  const int extended = t.repeats >= kStabilityMinRepeats ? std::max(t.repeats, kStabilityMaxRepeats) : t.repeats;
  t.max_repeats = r.int_in_range("max_repeats", 1, kMaxSteps, extended);
  if (t.max_repeats < t.repeats)
    r.fail_key("max_repeats", fmt::format("{} is below repeats = {} (equal to repeats: no extension)", t.max_repeats, t.repeats));
  if (t.warmup + t.max_repeats > kMaxSteps)
    r.fail_key("max_repeats", fmt::format("warmup + max_repeats = {} + {} is above the limit of {} steps", t.warmup,
                                          t.max_repeats, kMaxSteps));
  t.grad_clip = r.number("grad_clip", t.grad_clip, 0.0, true);
  t.step_timeout_s = r.number("step_timeout_s", t.step_timeout_s, 0.0, false);
  r.reject_unknown_keys();
  return t;
}

// A preset's machine as the defaults of the [device] keys it implies (the
// keys the workload sets are read afterwards and win): memory, GPUs per
// node, and the two link levels as the sim link (intra-node) and the
// inter-node link, in gigabits per second of bus bandwidth.
void apply_preset_defaults(DeviceSpec& d) {
  const DevicePreset& p = *d.preset;
  d.memory_capacity_bytes = p.memory_bytes;
  d.ranks_per_node = p.gpus_per_node;
  d.sim_link_latency_us = p.intra_node.latency_s * 1e6;
  d.sim_link_gbps = p.intra_node.bus_bytes_per_s * 8e-9;
  d.sim_inter_node_latency_us = p.inter_node.latency_s * 1e6;
  d.sim_inter_node_gbps = p.inter_node.bus_bytes_per_s * 8e-9;
}

// `[device] gemm_efficiency = [[K, e], ...]`: a workload's own GEMM
// efficiency table (docs/time-model.md, "Your own figures").
std::vector<GemmEfficiencyPoint> read_gemm_efficiency(TableReader& r, const Value& v) {
  constexpr std::string_view key = "gemm_efficiency";
  constexpr std::size_t kMaxPoints = 64;
  const auto bad = [&](std::string_view why) { r.fail_at(v, key, why); };
  if (!v.is_array() || v.as_array().empty() || v.as_array().size() > kMaxPoints)
    bad(fmt::format("expected 1 to {} [K, efficiency] pairs, such as [[256, 0.70], [4096, 0.82]], got {}", kMaxPoints,
                    v.is_array() ? fmt::format("{} of them", v.as_array().size()) : std::string(type_name(v))));
  const auto number = [](const Value& x) -> std::optional<double> {
    if (x.is_floating()) return x.as_floating();
    if (x.is_integer()) return static_cast<double>(x.as_integer());
    return std::nullopt;
  };
  std::vector<GemmEfficiencyPoint> table;
  for (std::size_t i = 0; i < v.as_array().size(); ++i) {
    const Value& e = v.as_array()[i];
    if (!e.is_array() || e.as_array().size() != 2)
      bad(fmt::format("entry {} is {}, expected a [K, efficiency] pair", i, literal(e)));
    const auto k = number(e.as_array()[0]), eff = number(e.as_array()[1]);
    if (!k || !eff || !std::isfinite(*k) || !std::isfinite(*eff))
      bad(fmt::format("entry {} is {}, expected two numbers", i, literal(e)));
    if (*k < 1.0 || *k > 1e9) bad(fmt::format("entry {}: K = {} is outside 1 to 1e9", i, literal(e.as_array()[0])));
    if (!(*eff > 0.0 && *eff <= 1.0))
      bad(fmt::format("entry {}: efficiency {} is outside (0, 1] (a share of the matrix peak)", i, literal(e.as_array()[1])));
    if (!table.empty() && *k <= table.back().k)
      bad(fmt::format("entry {}: K = {} does not follow K = {}; K must ascend", i, literal(e.as_array()[0]), table.back().k));
    table.push_back({*k, *eff});
  }
  return table;
}

DeviceSpec read_device(TableReader& r) {
  DeviceSpec d;
  d.backend = r.choice<BackendKind>("backend", d.backend,
                                    {{"cpu", BackendKind::cpu}, {"sim", BackendKind::sim}, {"cuda", BackendKind::cuda}});
  if (const Value* v = r.find("preset")) {
    std::string known;
    for (const DevicePreset& p : device_presets()) known += fmt::format("{}\"{}\"", known.empty() ? "" : ", ", p.name);
    if (!v->is_string()) r.fail_at(*v, "preset", fmt::format("expected one of {}, got {}", known, literal(*v)));
    d.preset = find_device_preset(v->as_string().str);
    if (!d.preset) r.fail_at(*v, "preset", fmt::format("expected one of {}, got {}", known, literal(*v)));
    apply_preset_defaults(d);
  }
  if (const auto bytes = r.bytes("memory_capacity", kMaxMemoryCapacity, "1 EiB")) d.memory_capacity_bytes = *bytes;
  d.threads_per_rank = r.int_in_range("threads_per_rank", 1, kMaxThreadsPerRank, d.threads_per_rank);
  // The modelled speeds at least, and the latencies at most, what keeps every
  // duration they give (FLOPs or bytes over a rate, sums of latencies) a
  // finite number: 1e-300 FLOP/s once printed "-nan" and "inf s" in plan
  // (issue 66). Any speed above is accepted (bench/whole: 1e30 for "free").
  const auto rate = [&r](std::string_view key, double fallback, double lo, const char* unit) {
    const double x = r.number(key, fallback, 0.0, false);
    if (r.find(key) && x < lo) r.fail_key(key, fmt::format("expected at least {:g} {}, got {:g}", lo, unit, x));
    return x;
  };
  const auto latency = [&r](std::string_view key, double fallback) {
    const double x = r.number(key, fallback, 0.0, true);
    if (r.find(key) && x > 1e9) r.fail_key(key, fmt::format("expected at most 1e+09 microseconds (1000 s), got {:g}", x));
    return x;
  };
  d.sim_flops_per_s = rate("sim_flops_per_s", d.sim_flops_per_s, 1.0, "FLOP/s");
  d.sim_link_latency_us = latency("sim_link_latency_us", d.sim_link_latency_us);
  d.sim_link_gbps = rate("sim_link_gbps", d.sim_link_gbps, 1e-9, "Gbit/s (one bit per second)");
  d.ranks_per_node = r.int_in_range("ranks_per_node", 1, kMaxRanks, d.ranks_per_node);
  d.sim_inter_node_latency_us = latency("sim_inter_node_latency_us", d.sim_inter_node_latency_us);
  d.sim_inter_node_gbps = rate("sim_inter_node_gbps", d.sim_inter_node_gbps, 1e-9, "Gbit/s (one bit per second)");
  d.sim_load = r.number("sim_load", d.sim_load, 0.0, false);
  if (d.sim_load > 1000.0) r.fail_key("sim_load", "expected at most 1000");
  d.sim_jitter = r.number("sim_jitter", d.sim_jitter, 0.0, true);
  if (d.sim_jitter > 1.0) r.fail_key("sim_jitter", "expected at most 1 (a log-normal sigma)");
  if (auto s = r.integer("sim_jitter_seed")) {
    if (*s < 0) r.fail_key("sim_jitter_seed", "expected a non-negative integer");
    d.sim_jitter_seed = static_cast<std::uint64_t>(*s);
  }
  if (const Value* v = r.find("gemm_efficiency")) d.gemm_efficiency = read_gemm_efficiency(r, *v);
  d.hbm_efficiency = r.number("hbm_efficiency", d.hbm_efficiency, 0.0, false);
  if (d.hbm_efficiency > 1.0) r.fail_key("hbm_efficiency", "expected at most 1 (a share of the peak bandwidth)");
  d.kernel_launch_us = r.number("kernel_launch_us", d.kernel_launch_us, 0.0, true);
  if (d.kernel_launch_us > 1e6) r.fail_key("kernel_launch_us", "expected at most 1e6 (one second)");
  d.gemm_accumulate_serial = r.number("gemm_accumulate_serial", d.gemm_accumulate_serial, 0.0, true);
  if (d.gemm_accumulate_serial > 1.0)
    r.fail_key("gemm_accumulate_serial", "expected at most 1 (a share of the accumulating GEMMs' output read)");
  if (const auto own = own_device_figures(d); !d.preset && !own.empty())
    r.fail_key(own.front(), "replaces a device preset's figure and needs [device] preset (\"a100-80gb\", \"h100-80gb\" or \"h200-141gb\")");
  d.sim_clock = r.choice<SimClock>("sim_clock", d.sim_clock, {{"wall", SimClock::wall}, {"virtual", SimClock::virtual_time}});
  if (d.sim_clock == SimClock::virtual_time && d.backend != BackendKind::sim)
    r.fail_key("sim_clock", fmt::format("\"virtual\" models time and needs backend = \"sim\" (the {} backend measures real time)",
                          to_string(d.backend)));
  d.transport = r.choice<TransportKind>(
      "transport", d.transport,
      {{"auto", TransportKind::automatic}, {"mpi", TransportKind::mpi}, {"nccl", TransportKind::nccl}});
  if (d.transport == TransportKind::nccl && d.backend != BackendKind::cuda)
    r.fail_key("transport", "\"nccl\" moves GPU memory and needs backend = \"cuda\" (use \"mpi\" or \"auto\")");
  r.reject_unknown_keys();
  return d;
}

// `path` as written in workload `file`: absolute, or relative to its folder.
std::string resolve_beside(const std::string& file, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute()) return path;
  return (std::filesystem::path(file).parent_path() / p).string();
}

// `schedule` (a built-in name or "file:PATH"), `virtual_stages_per_rank`
// and, for a file schedule, its CSV text: `schedule_csv` when given (the
// effective TOML of a results file carries it), else read from PATH, relative
// to the workload file's folder.
void read_schedule(TableReader& r, RunSpec& run, std::vector<std::string>& warnings) {
  const bool schedule_given = r.find("schedule") != nullptr;
  const std::optional<std::string> text = r.str("schedule");
  if (text && text->starts_with("file:")) {
    run.schedule = ScheduleKind::file;
    run.schedule_file = text->substr(5);
    if (run.schedule_file.empty()) r.fail_key("schedule", "\"file:\" needs a path to a CSV schedule");
    if (const std::optional<std::string> csv = r.str("schedule_csv")) {
      run.schedule_csv = *csv;
    } else {
      const std::string path = resolve_beside(r.file(), run.schedule_file);
      std::optional<std::string> content = read_at_most(path, kMaxTomlBytes + 1);
      if (!content) r.fail_key("schedule", fmt::format("cannot open the schedule file {}", printable(path)));
      if (content->size() > kMaxTomlBytes)
        r.fail_key("schedule", fmt::format("{} is larger than {} bytes", printable(path), kMaxTomlBytes));
      run.schedule_csv = std::move(*content);
    }
  } else {
    static constexpr std::pair<std::string_view, ScheduleKind> kNames[] = {
        {"gpipe", ScheduleKind::gpipe},
        {"fill_drain", ScheduleKind::gpipe},
        {"1f1b", ScheduleKind::one_f_one_b},
        {"eager-1f1b", ScheduleKind::eager_one_f_one_b},
        {"interleaved-1f1b", ScheduleKind::interleaved_one_f_one_b},
        {"zb-h1", ScheduleKind::zb_h1},
        {"zb-v", ScheduleKind::zb_v},
        {"looped-bfs", ScheduleKind::looped_bfs},
        {"interleaved-zb", ScheduleKind::interleaved_zb},
        {"dualpipev", ScheduleKind::dualpipev}};
    const auto known = std::find_if(std::begin(kNames), std::end(kNames), [&](const auto& n) { return text && *text == n.first; });
    if (text && known == std::end(kNames)) {
      std::string names;
      for (const auto& n : kNames) names += fmt::format("\"{}\", ", n.first);
      r.fail_key("schedule", fmt::format("unknown value \"{}\" (expected one of {}or \"file:PATH\" for a CSV schedule)", printable(*text),
                            names));
    }
    run.schedule = text ? known->second : ScheduleKind::one_f_one_b;
    if (r.find("schedule_csv")) r.fail_key("schedule_csv", "only with schedule = \"file:PATH\"");
  }
  if (schedule_given && run.mode == RunMode::inference)
    warnings.push_back(fmt::format("{}: ignored: inference runs use the forward-only schedule", r.dotted("schedule")));
  run.recompute = r.choice<Recompute>("recompute", Recompute::none,
                                      {{"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}});
  if (run.recompute != Recompute::none && run.mode == RunMode::inference) {
    warnings.push_back(fmt::format("{}: ignored: inference keeps no activations to recompute", r.dotted("recompute")));
    run.recompute = Recompute::none;
  }
  if (run.recompute == Recompute::full && splits_backward(run.schedule))
    r.fail_key("recompute", fmt::format("\"full\" with schedule \"{}\" is not supported: a split backward keeps activations until W, "
                          "recomputation frees them at B",
                          to_string(run.schedule)));
  const int fixed = fixed_virtual_stages(run.schedule);
  const bool any_v = any_virtual_stages(run.schedule);
  run.virtual_stages_per_rank = r.int_in_range("virtual_stages_per_rank", 1, kMaxVirtualStagesPerRank, any_v ? 1 : fixed);
  if (run.mode == RunMode::inference) {
    run.virtual_stages_per_rank = 1;
  } else if (const std::string why = schedule_microbatch_problem(run.schedule, run.pipeline_size, run.num_microbatches);
             !why.empty()) {
    r.fail_key("num_microbatches", why);
  } else if (!any_v && run.virtual_stages_per_rank != fixed) {
    r.fail_key("virtual_stages_per_rank", fmt::format("schedule \"{}\" holds {} model chunk(s) per rank; virtual_stages_per_rank = {} needs schedule "
                          "= \"interleaved-1f1b\", \"looped-bfs\" or \"interleaved-zb\"",
                          to_string(run.schedule), fixed, run.virtual_stages_per_rank));
  }
}

// `tensor_parallel` and `sequence_parallel` (docs/tensor-parallel.md): t
// splits the attention heads (and llama's K/V heads), ffn_hidden and the
// vocabulary (padded), so it must divide the first three; sequence
// parallelism splits the sequence, so t must divide seq_len.
void read_tensor_parallel(TableReader& r, RunSpec& run, const ModelSpec& model, std::vector<std::string>& warnings) {
  run.tensor_parallel = r.int_in_range("tensor_parallel", 1, kMaxTensorParallel, 1);
  const int t = run.tensor_parallel;
  if (std::int64_t{run.pipeline_size} * run.data_parallel * run.context_parallel * t > kMaxRanks)
    r.fail_key("tensor_parallel", fmt::format("pipeline_size x data_parallel x context_parallel x tensor_parallel = {} x {} x "
                                              "{} x {} ranks is above the limit of {}",
                                              run.pipeline_size, run.data_parallel, run.context_parallel, t, kMaxRanks));
  if (const std::string why = tensor_parallel_problem(model, t, false); !why.empty())
    r.fail_key("tensor_parallel", why);
  run.sequence_parallel = r.boolean("sequence_parallel", false);
  if (run.sequence_parallel && t == 1) {
    warnings.push_back(fmt::format("{}: ignored: tensor_parallel = 1 has no sequence to split", r.dotted("sequence_parallel")));
    run.sequence_parallel = false;
  }
  if (const std::string why = tensor_parallel_problem(model, t, run.sequence_parallel); !why.empty())
    r.fail_key("sequence_parallel", why);
  if (run.sequence_parallel && run.context_parallel > 1 && model.seq_len % (2 * run.context_parallel * t) != 0)
    r.fail_key("sequence_parallel", fmt::format("2 x context_parallel x tensor_parallel = {} does not divide model.seq_len "
                                                "= {} (each chunk is split over the tensor group)",
                                                2 * run.context_parallel * t, model.seq_len));
  if (run.recompute == Recompute::selective && model.kind == ModelKind::mlp) {
    warnings.push_back(fmt::format("{}: \"selective\" recomputes attention; an mlp model has none, so nothing is recomputed",
                                   r.dotted("recompute")));
    run.recompute = Recompute::none;
  }
}

// `steps` = warmup + max_repeats (bounds the events a run records).
// `context_parallel` and `cp_comm` (docs/context-parallel.md): c splits
// each sequence into 2c chunks, two a rank, and merges attention blocks by
// their log-sum-exp, so it needs flash attention and 2c dividing seq_len
// (2c·t with sequence parallelism: read_tensor_parallel).
void read_context_parallel(TableReader& r, RunSpec& run, const ModelSpec& model, std::vector<std::string>& warnings) {
  run.context_parallel = r.int_in_range("context_parallel", 1, kMaxContextParallel, 1);
  run.cp_comm = r.choice<CpComm>("cp_comm", CpComm::ring, {{"ring", CpComm::ring}, {"allgather", CpComm::allgather}});
  const int c = run.context_parallel;
  if (c == 1) {
    if (r.find("cp_comm"))
      warnings.push_back(fmt::format("{}: ignored: context_parallel = 1 exchanges nothing", r.dotted("cp_comm")));
    return;
  }
  if (model.kind == ModelKind::mlp)
    r.fail_key("context_parallel", "kind = \"mlp\" has no attention: its tokens need nothing of each other's");
  if (model.attention != Attention::flash)
    r.fail_key("context_parallel", "context parallelism merges the attention's blocks by their log-sum-exp: it needs "
                                   "model.attention = \"flash\"");
  if (model.seq_len % (2 * c) != 0)
    r.fail_key("context_parallel", fmt::format("2 x context_parallel = {} does not divide model.seq_len = {} (each "
                                               "sequence is cut into 2c equal chunks)",
                                               2 * c, model.seq_len));
  if (std::int64_t{run.pipeline_size} * c > kMaxRanks)
    r.fail_key("context_parallel", fmt::format("pipeline_size x context_parallel = {} x {} ranks is above the limit of {}",
                                               run.pipeline_size, c, kMaxRanks));
}

// `data_parallel` and its companions (docs/parallel.md): the replicas, the
// optimizer's sharding, where the gradients are synchronised, the rank order.
void read_data_parallel(TableReader& r, RunSpec& run, std::vector<std::string>& warnings) {
  run.data_parallel = r.int_in_range("data_parallel", 1, kMaxDataParallel, 1);
  if (std::int64_t{run.pipeline_size} * run.context_parallel * run.data_parallel > kMaxRanks)
    r.fail_key("data_parallel", fmt::format("pipeline_size x context_parallel x data_parallel = {} x {} x {} ranks is "
                                            "above the limit of {}",
                                            run.pipeline_size, run.context_parallel, run.data_parallel, kMaxRanks));
  run.optimizer_sharding = r.choice<OptimizerSharding>(
      "optimizer_sharding", OptimizerSharding::none,
      {{"none", OptimizerSharding::none}, {"zero1", OptimizerSharding::zero1}, {"zero2", OptimizerSharding::zero2},
       {"fsdp", OptimizerSharding::fsdp}});
  if (r.find("fsdp_reshard_after_forward")) {
    run.fsdp_reshard_after_forward = r.boolean("fsdp_reshard_after_forward", false);
    if (run.optimizer_sharding != OptimizerSharding::fsdp && run.grad_group() > 1)
      warnings.push_back(fmt::format("{}: ignored: only optimizer_sharding = \"fsdp\" gathers parameters per layer",
                                     r.dotted("fsdp_reshard_after_forward")));
  }
  run.grad_sync = r.choice<GradSync>(
      "grad_sync", GradSync::after_flush,
      {{"after_flush", GradSync::after_flush}, {"after_chunk", GradSync::after_chunk}, {"overlap", GradSync::overlap}});
  // 1 GiB: a bucket is one collective of 32-bit element counts.
  if (const auto bytes = r.bytes("grad_bucket_bytes", std::uint64_t{1} << 30, "1 GiB"))
    run.grad_bucket_bytes = static_cast<std::int64_t>(*bytes);
  if (run.grad_bucket_bytes != 0 && run.grad_sync != GradSync::overlap && !gathers_in_first_forward(run) &&
      run.grad_group() > 1)
    warnings.push_back(fmt::format("{}: ignored: only grad_sync = \"overlap\" (and parameter gathers inside the "
                                   "forward) launch buckets of that size",
                                   r.dotted("grad_bucket_bytes")));
  run.rank_order = r.choice<RankOrder>("rank_order", RankOrder::tp_dp_pp,
                                       {{"tp-dp-pp", RankOrder::tp_dp_pp}, {"tp-pp-dp", RankOrder::tp_pp_dp}});
  // Keys that change nothing here are said to, not silently kept.
  const char* why = run.mode == RunMode::inference ? "inference has no gradients or optimizer"
                    : run.grad_group() == 1        ? "data_parallel = 1: one replica has nothing to shard or synchronise"
                                                   : nullptr;
  if (why)
    for (const char* key : {"optimizer_sharding", "grad_sync", "grad_bucket_bytes", "fsdp_reshard_after_forward"})
      if (r.find(key)) warnings.push_back(fmt::format("{}: ignored: {}", r.dotted(key), why));
  if (why) {
    run.optimizer_sharding = OptimizerSharding::none;
    run.fsdp_reshard_after_forward.reset();
    run.grad_sync = GradSync::after_flush;
    run.grad_bucket_bytes = 0;
  }
}

RunSpec read_run(TableReader& r, const ModelSpec& model, int steps, std::vector<std::string>& warnings,
                 std::string& explicit_baseline) {
  RunSpec run;
  run.source_line = static_cast<int>(r.value().location().line());
  run.name = r.str_required("name");
  if (!valid_name(run.name))
    r.fail_key("name", fmt::format("{} (it names an HDF5 group)", kNameRule));
  run.pipeline_size = r.int_in_range("pipeline_size", 1, kMaxPipelineSize, 1);
  run.micro_batch_size = r.int_in_range("micro_batch_size", 1, kMaxMicroBatchSize, 1);
  run.num_microbatches = r.int_in_range("num_microbatches", 1, kMaxMicrobatches, 1);
  if (std::int64_t{run.pipeline_size} * run.num_microbatches > kMaxStageMicrobatches)
    r.fail_key("num_microbatches", fmt::format("pipeline_size x num_microbatches = {} x {} is above the limit of {} (the schedule is built "
                          "action by action)",
                          run.pipeline_size, run.num_microbatches, kMaxStageMicrobatches));
  run.mode = r.choice<RunMode>("mode", RunMode::train, {{"train", RunMode::train}, {"inference", RunMode::inference}});
  read_schedule(r, run, warnings);
  read_context_parallel(r, run, model, warnings);
  read_data_parallel(r, run, warnings);
  read_tensor_parallel(r, run, model, warnings);
  if (std::int64_t{run.model_stages()} * run.num_microbatches > kMaxStageMicrobatches)
    r.fail_key("virtual_stages_per_rank", fmt::format("pipeline_size x virtual_stages_per_rank x num_microbatches = {} x {} x {} is above the limit "
                          "of {} (the schedule is built action by action)",
                          run.pipeline_size, run.virtual_stages_per_rank, run.num_microbatches, kMaxStageMicrobatches));
  // Actions per stage and micro-batch: F; B; W for split-backward schedules.
  const bool split = splits_backward(run.schedule) || run.schedule == ScheduleKind::file;
  const int per_microbatch = run.mode == RunMode::train ? (split ? 3 : 2) : 1;
  const std::int64_t events = std::int64_t{steps} * per_microbatch * run.model_stages() * run.num_microbatches;
  if (events > kMaxEventsPerRun)
    r.fail_key("num_microbatches", fmt::format("{} steps x {} stages x {} micro-batches record {} events, above the limit of {} per run",
                          steps, run.model_stages(), run.num_microbatches, events, kMaxEventsPerRun));
  run.remainder = r.choice<Remainder>("remainder", Remainder::first,
                                      {{"first", Remainder::first}, {"last", Remainder::last}, {"balanced", Remainder::balanced}});
  run.balance_by = r.choice<BalanceBy>("balance_by", BalanceBy::flops,
                                       {{"flops", BalanceBy::flops}, {"params", BalanceBy::params}});
  // `partition` names the rule in one word (docs/partition.md); it replaces
  // remainder and balance_by, so it cannot be given with them.
  if (const Value* v = r.find("partition")) {
    for (const char* other : {"remainder", "balance_by"})
      if (r.find(other)) r.fail_at(*v, "partition", fmt::format("give partition or {}, not both", other));
    const std::string rule = r.choice<std::string>(
        "partition", "", {{"remainder-first", "first"}, {"remainder-last", "last"}, {"balanced-cost", "cost"},
                          {"balanced-params", "params"}});
    run.remainder = rule == "first" ? Remainder::first : rule == "last" ? Remainder::last : Remainder::balanced;
    run.balance_by = rule == "params" ? BalanceBy::params : BalanceBy::flops;
  }
  run.layers_per_stage_origin = r.int_at_least("layers_per_stage_origin", 0, 0);
  if (run.layers_per_stage_origin > 1)
    r.fail_key("layers_per_stage_origin", "expected 0 or 1");

  const int model_stages = run.model_stages();
  if (model_stages > model.layers)
    r.fail_key("pipeline_size", run.virtual_stages_per_rank == 1
                  ? fmt::format("{} stages for {} layers would leave a stage with 0 layers", run.pipeline_size, model.layers)
                  : fmt::format("{} stages x {} chunks = {} model chunks for {} layers would leave a chunk with 0 layers",
                                run.pipeline_size, run.virtual_stages_per_rank, model_stages, model.layers));

  if (const Value* v = r.find("layers_per_stage")) {
    if (!v->is_array()) r.fail_at(*v, "layers_per_stage", fmt::format("expected an array of integers, got {}", type_name(*v)));
    if (v->as_array().size() != static_cast<std::size_t>(model_stages))
      r.fail_at(*v, "layers_per_stage",
                run.virtual_stages_per_rank == 1
                    ? fmt::format("has {} entries but pipeline_size = {}", v->as_array().size(), run.pipeline_size)
                    : fmt::format("has {} entries but the model is cut into pipeline_size x virtual_stages_per_rank = {} "
                                  "chunks (one entry per virtual stage, in model order)",
                                  v->as_array().size(), model_stages));
    long long sum = 0;
    for (std::size_t i = 0; i < v->as_array().size(); ++i) {
      const Value& e = v->as_array()[i];
      if (!e.is_integer()) r.fail_at(*v, "layers_per_stage", fmt::format("element {} is {}, expected an integer", i, type_name(e)));
      if (e.as_integer() < 1 || e.as_integer() > INT_MAX)
        r.fail_at(*v, "layers_per_stage", fmt::format("stage {} has {} layers; every stage needs at least 1", i, e.as_integer()));
      run.layers_per_stage.push_back(static_cast<int>(e.as_integer()));
      sum += e.as_integer();
    }
    if (sum != model.layers)
      r.fail_at(*v, "layers_per_stage", fmt::format("sums to {} but model.layers = {}", sum, model.layers));
  }
  explicit_baseline = r.str_or("baseline", "");
  r.reject_unknown_keys();
  return run;
}

// Cross-run rules: unique names, baselines.
void link_runs(Job& job, const std::vector<const Value*>& run_values,
               const std::vector<std::string>& explicit_baselines, const std::string& file) {
  for (std::size_t i = 0; i < job.runs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (job.runs[j].name == job.runs[i].name)
        throw ConfigError(fmt::format("{}: run.{}.name: duplicate run name (first defined at line {})",
                                      where(file, run_values[i]->as_table().at("name")), job.runs[i].name,
                                      job.runs[j].source_line));
  }
  for (std::size_t i = 0; i < job.runs.size(); ++i) {
    RunSpec& run = job.runs[i];
    const std::string& named = explicit_baselines[i];
    if (!named.empty()) {
      const RunSpec* base = job.find_run(named);
      auto fail = [&](std::string_view why) {
        const Value& v = run_values[i]->as_table().at("baseline");
        throw ConfigError(fmt::format("{}: run.{}.baseline: {}", where(file, v), run.name, why));
      };
      if (!base) fail(fmt::format("no run named \"{}\"", printable(named)));
      if (base == &run) fail("a run cannot be its own baseline");
      if (base->mode != run.mode) fail(fmt::format("baseline \"{}\" is a {} run but this is a {} run",
                                                   named, to_string(base->mode), to_string(run.mode)));
      if (base->pipeline_size != 1)
        job.warnings.push_back(fmt::format("run.{}.baseline: \"{}\" has pipeline_size = {}, not a single-stage baseline",
                                           run.name, named, base->pipeline_size));
      run.baseline = named;
    } else if (run.ranks() > 1) {
      for (const auto& other : job.runs)
        if (other.ranks() == 1 && other.mode == run.mode) {
          run.baseline = other.name;
          break;
        }
    }
    if (!run.baseline.empty()) {
      const RunSpec* base = job.find_run(run.baseline);
      // "2 x 4", or "2 x 4 x 2 replicas" with data parallelism.
      auto formula = [](const RunSpec& x) {
        return fmt::format("{} x {}{}", x.micro_batch_size, x.num_microbatches,
                           x.data_parallel > 1 ? fmt::format(" x {} replicas", x.data_parallel) : "");
      };
      if (base->global_batch() != run.global_batch())
        job.warnings.push_back(fmt::format(
            "run.{}: global batch {} (= {}) differs from baseline \"{}\" ({} = {}); losses are not comparable",
            run.name, run.global_batch(), formula(run), base->name, base->global_batch(), formula(*base)));
    }
  }
}

Job build_job(Value root, const std::string& file, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(root, file, o);

  Job job;
  job.source_path = file;
  job.overrides = overrides;
  TableReader top(root, "", file);
  {
    auto schema = top.integer("schema");
    if (!schema) top.fail_missing("schema", "schema = 1");
    if (*schema != 1) top.fail_at(*top.find("schema"), "schema", fmt::format("unsupported schema {} (this pipebench reads schema 1)", *schema));
  }
  auto sub = [&](std::string_view key, bool required) -> const Value& {
    static const Value empty(toml::table{});
    const Value* t = top.table(key);
    if (!t && required) top.fail_missing(key, fmt::format("a [{}] table", key));
    return t ? *t : empty;
  };
  {
    TableReader r(sub("job", true), "job", file, &job.locations);
    job.name = r.str_required("name");
    if (!valid_name(job.name)) r.fail_key("name", fmt::format("{} (it names a results folder)", kNameRule));
    job.description = r.str_or("description", "");
    check_free_text(r, "description", job.description);
    r.reject_unknown_keys();
  }
  {
    TableReader r(sub("model", true), "model", file, &job.locations);
    job.model = read_model(r, job.warnings);
  }
  {
    TableReader r(sub("train", false), "train", file, &job.locations);
    job.train = read_train(r);
  }
  {
    TableReader r(sub("device", false), "device", file, &job.locations);
    job.device = read_device(r);
  }
  if (job.device.backend == BackendKind::cpu && job.model.dtype != DType::fp32)
    job.warnings.push_back(fmt::format("model.dtype = \"{}\": the cpu backend computes in fp32; memory and losses are fp32",
                                       to_string(job.model.dtype)));

  const Value* runs = top.find("run");
  if (!runs) top.fail_missing("run", "at least one [[run]] table");
  if (!runs->is_array() || runs->as_array().empty())
    top.fail_at(*runs, "run", "expected one or more [[run]] tables");
  if (runs->as_array().size() > static_cast<std::size_t>(kMaxRuns))
    top.fail_at(*runs, "run", fmt::format("{} [[run]] tables, above the limit of {}", runs->as_array().size(), kMaxRuns));
  std::vector<const Value*> run_values;
  std::vector<std::string> explicit_baselines;
  for (const Value& rv : runs->as_array()) {
    if (!rv.is_table()) top.fail_at(rv, "run", "expected [[run]] tables");
    // Keys are named run.NAME.key once NAME is known to be a valid name.
    std::string label = fmt::format("run[{}]", run_values.size());
    if (rv.as_table().count("name") && rv.as_table().at("name").is_string() &&
        valid_name(rv.as_table().at("name").as_string().str))
      label = "run." + rv.as_table().at("name").as_string().str;
    TableReader r(rv, label, file, &job.locations);
    explicit_baselines.emplace_back();
    job.runs.push_back(
        read_run(r, job.model, job.train.warmup + job.train.max_repeats, job.warnings, explicit_baselines.back()));
    run_values.push_back(&rv);
  }
  link_runs(job, run_values, explicit_baselines, file);
  top.reject_unknown_keys();
  // A file schedule travels with the workload: its CSV text goes into the
  // effective TOML, so a results file can be re-planned anywhere.
  auto& run_tables = root.as_table().at("run").as_array();
  for (std::size_t i = 0; i < job.runs.size(); ++i)
    if (job.runs[i].schedule == ScheduleKind::file) run_tables[i].as_table()["schedule_csv"] = job.runs[i].schedule_csv;

  job.effective_toml = format_toml(root);
  return job;
}

}  // namespace

bool valid_name(std::string_view s) {
  return !s.empty() && s.size() <= kMaxNameLength && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

Job parse_job(const std::string& toml_text, const std::string& source_name, const std::vector<std::string>& overrides) {
  return build_job(parse_toml(toml_text, source_name), source_name, overrides);
}

Job load_job(const std::string& path, const std::vector<std::string>& overrides) {
  // One byte over the limit is enough for parse_toml to refuse the file.
  const std::optional<std::string> text = read_at_most(path, kMaxTomlBytes + 1);
  if (!text) throw ConfigError(fmt::format("{}: cannot open workload file", path));
  return build_job(parse_toml(*text, path), path, overrides);
}

namespace {
void flatten(const Value& v, const std::string& key, std::map<std::string, std::string>& out) {
  if (v.is_table()) {
    for (const auto& [k, sub] : v.as_table()) flatten(sub, key.empty() ? k : key + "." + k, out);
    return;
  }
  if (v.is_array() && !v.as_array().empty() && v.as_array().front().is_table()) {
    std::size_t i = 0;
    for (const auto& t : v.as_array()) {
      const auto& tab = t.as_table();
      const auto name = tab.find("name");
      const std::string id = name != tab.end() && name->second.is_string() ? std::string(name->second.as_string().str)
                                                                           : std::to_string(i);
      flatten(t, key + "." + id, out);
      ++i;
    }
    return;
  }
  std::string text;
  for (const char c : format_toml(v)) text += c == '\n' ? ' ' : c;
  while (!text.empty() && text.back() == ' ') text.pop_back();
  out[key] = text;
}
}  // namespace

std::map<std::string, std::string> toml_keys(const std::string& toml_text, const std::string& source_name) {
  std::map<std::string, std::string> out;
  flatten(parse_toml(toml_text, source_name), "", out);
  return out;
}

std::string job_toml_without_runs(const Job& job, const std::string& name, const std::string& description) {
  Value root = parse_toml(job.effective_toml, job.source_path);
  root.as_table().erase("run");
  Value& header = root.as_table()["job"];
  header = toml::table{};
  header.as_table()["name"] = name;
  header.as_table()["description"] = description;
  return format_toml(root);
}

}  // namespace pipebench
