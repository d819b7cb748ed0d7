// Image-fetch actor implementation (see image_fetch.hpp): the peer protocol
// and the actor's behavior. One fetch_job per ref in flight; each job walks
// its candidate peers, one attempt at a time. An attempt is numbered: chunk
// replies of an abandoned attempt (the peer failed, the next one is being
// tried) are recognised and dropped. The file work on both ends (what this
// node holds and serves, committing what a transfer wrote) is plain layers
// code in layers/transfer.hpp, run here on the actor's own worker pool.
#include "actors/image_fetch.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <random>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/peer_links.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "layers/blob_cache.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "layers/transfer.hpp"
#include "layers/uring_file.hpp"

namespace dsec {

namespace {

/// Bytes per chunk request: big enough that per-message cost (~0.2 ms per
/// CAF round trip here) is small against the copy, small enough that a few
/// in flight stay well under BASP's buffers.
constexpr uint32_t chunk_bytes = 1u << 20;
/// Chunk requests in flight per transfer: hides the round trip.
constexpr int pipeline_depth = 4;
/// Bound on connecting, on the catalog question, and on each chunk
/// (core/clock.hpp). A peer slower than this is skipped; too short would
/// skip peers under load.
constexpr auto connect_timeout = connect_wait;
constexpr auto info_timeout = layer_probe_wait;
constexpr auto chunk_timeout = chunk_wait;
/// How long a create's worker waits for a fetch (a large image over a slow
/// link); the fetch itself fails earlier when every peer fails.
constexpr auto waiter_timeout = layer_fetch_wait;
/// Largest image accepted from a peer's catalog entry (sanity bound).
constexpr int64_t max_image_bytes = int64_t{64} << 30;
/// Threads for this actor's file work (serving reads, writes, verification).
constexpr size_t io_threads = 4;

struct fetch_job {
  std::string ref;
  std::vector<std::function<void(expected<layer_info>)>> waiters;
  std::vector<member_info> candidates;
  size_t next = 0;
  std::vector<std::string> failures; // "node: why", one per failed peer
  bool only_not_found = true;        // every peer said not_found (or none asked)
  std::chrono::steady_clock::time_point started;
  // The current attempt.
  uint64_t attempt = 0;
  std::string peer_id;
  placement_actor peer;
  layer_info info;
  // What the transfer writes now: the image, then (chunked layers, see
  // layers/blob_device.hpp) the data blob the image names.
  bool data_phase = false;
  std::string data_digest;
  uint64_t size = 0;  // bytes to transfer (a data blob: at most this many)
  uint64_t slack = 0; // a data blob may end up to this many bytes short of `size`
  std::shared_ptr<layers::uring_writer> writer;
  std::string tmp;
  uint64_t next_offset = 0;
  uint64_t received = 0;
  int in_flight = 0;
};
using job_ptr = std::shared_ptr<fetch_job>;

struct image_fetch_state {
  static inline const char* name = "image_fetch";
  node_context_ptr ctx;
  /// The front door, asked for the gossip view (set by the supervisor).
  placement_actor placement;
  std::shared_ptr<layers::blob_cache> cache;
  std::shared_ptr<layers::store> store;
  std::shared_ptr<sys::worker_pool> io;
  std::map<std::string, job_ptr> jobs;    // by ref
  peer_links<placement_actor> peers; // placement actors of the nodes fetched from
  uint64_t fetches_total = 0;
  uint64_t fetch_failures_total = 0;
};
using fetch_actor_ptr = image_fetch_actor::stateful_pointer<image_fetch_state>;

/// A log line that begins with who: the node and this actor.
caf::actor_ostream log(fetch_actor_ptr self) {
  auto out = caf::aout(self);
  out << "dsec node " << self->state.ctx->config.node_id << ": image_fetch: ";
  return out;
}

std::string random_name() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000);
}

// -- one job ---------------------------------------------------------------------

void try_next(fetch_actor_ptr self, job_ptr job);

void finish_job(fetch_actor_ptr self, job_ptr job, expected<layer_info> result) {
  for (auto& w : job->waiters)
    w(result);
  self->state.jobs.erase(job->ref);
}

/// Drops the current attempt's temp file (on the io pool) and moves on.
void attempt_failed(fetch_actor_ptr self, job_ptr job, const error& why) {
  ++job->attempt; // replies of this attempt are stale from now on
  if (why.code != errc::not_found)
    job->only_not_found = false;
  job->failures.push_back(job->peer_id + ": " + why.message);
  log(self) << "fetch layer " << job->ref << " from node " << job->peer_id
            << " failed: " << why.message << std::endl;
  if (why.code == errc::unavailable || why.code == errc::timeout)
    self->state.peers.drop(job->peer_id, why); // reconnect next time
  auto writer = std::move(job->writer);
  auto tmp = std::exchange(job->tmp, std::string{});
  if (!writer && tmp.empty())
    return try_next(self, job);
  run_blocking(self, *self->state.io,
               [writer = std::move(writer), tmp]() mutable {
                 writer.reset(); // waits for its writes, closes the file
                 if (!tmp.empty())
                   ::unlink(tmp.c_str());
                 return true;
               },
               [self, job](bool) { try_next(self, job); });
}

void begin_writing(fetch_actor_ptr self, job_ptr job);

/// The layer is complete in the store: counts it, makes room, answers.
void fetched(fetch_actor_ptr self, job_ptr job) {
  auto cache = self->state.cache;
  auto src = self->state.ctx->layers;
  auto info = job->info;
  run_blocking(
    self, *self->state.io,
    [cache, src, info] {
      if (cache) {
        cache->record_fetched(info.digest, static_cast<uint64_t>(info.size_bytes));
        cache->evict(info.digest);
      }
      if (src)
        src->refresh_held();
      return true;
    },
    [self, job](bool) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - job->started)
                  .count();
      ++self->state.fetches_total;
      log(self) << "fetched layer " << job->ref << " (" << job->info.digest << ", "
                << job->info.size_bytes << " bytes"
                << (job->data_digest.empty() ? "" : " + data blob " + job->data_digest)
                << ") from node " << job->peer_id << " in " << ms << " ms" << std::endl;
      finish_job(self, job, job->info);
    });
}

/// Verifies and commits the complete transfer of the image or data blob.
void complete(fetch_actor_ptr self, job_ptr job) {
  auto attempt = job->attempt;
  auto writer = std::move(job->writer);
  auto tmp = std::exchange(job->tmp, std::string{});
  auto store = self->state.store;
  auto info = job->info;
  auto size = job->size;
  if (job->data_phase) {
    auto digest = job->data_digest;
    return run_blocking(
      self, *self->state.io,
      [writer = std::move(writer), tmp, store, info, size, digest]() mutable -> expected<bool> {
        auto st = writer->finish(size);
        writer.reset();
        if (!st) {
          ::unlink(tmp.c_str());
          return st.err();
        }
        return layers::commit_fetched_data_blob(*store, tmp, info, digest);
      },
      [self, job, attempt](expected<bool>& out) {
        if (attempt != job->attempt)
          return;
        if (!out)
          return attempt_failed(self, job, out.err());
        fetched(self, job);
      });
  }
  run_blocking(
    self, *self->state.io,
    [writer = std::move(writer), tmp, store, info,
     size]() mutable -> expected<layers::committed_image> {
      auto st = writer->finish(size);
      writer.reset();
      if (!st) {
        ::unlink(tmp.c_str());
        return st.err();
      }
      return layers::commit_fetched_image(*store, tmp, info);
    },
    [self, job, attempt](expected<layers::committed_image>& out) {
      if (attempt != job->attempt)
        return;
      if (!out)
        return attempt_failed(self, job, out.err());
      job->info = out->info;
      if (out->data_digest.empty())
        return fetched(self, job);
      // A chunked layer: its data blob from the same peer.
      job->data_phase = true;
      job->data_digest = out->data_digest;
      job->size = out->data_max;
      job->slack = out->slack;
      begin_writing(self, job);
    });
}

/// Keeps `pipeline_depth` chunk requests in flight until everything is asked for.
void pump(fetch_actor_ptr self, job_ptr job) {
  auto digest = job->data_phase ? job->data_digest : job->info.digest;
  while (job->in_flight < pipeline_depth && job->next_offset < job->size) {
    auto offset = job->next_offset;
    auto len = static_cast<uint32_t>(std::min<uint64_t>(chunk_bytes, job->size - offset));
    job->next_offset += len;
    ++job->in_flight;
    auto attempt = job->attempt;
    self->request(job->peer, caf::duration{chunk_timeout}, blob_atom::value, digest, offset, len)
      .then(
        [self, job, attempt, offset, len](std::string& data) {
          if (attempt != job->attempt)
            return;
          --job->in_flight;
          if (data.size() != len) {
            // Only a data blob's last chunk may be short: its size is known
            // to the block, and the digest check below covers the rest.
            bool last = offset + len == job->size;
            if (!last || len - data.size() > job->slack)
              return attempt_failed(self, job,
                                    internal_error("chunk at offset " + std::to_string(offset)
                                                   + ": asked " + std::to_string(len)
                                                   + " bytes, got " + std::to_string(data.size())
                                                   + " (truncated image)"));
            job->size = offset + data.size();
          }
          job->received += data.size();
          auto writer = job->writer;
          self->state.io->post([writer, offset, data = std::move(data)]() mutable {
            (void)writer->write_at(offset, std::move(data)); // errors surface in finish()
          });
          if (job->received == job->size)
            return complete(self, job);
          pump(self, job);
        },
        [self, job, attempt, offset](caf::error& err) {
          if (attempt != job->attempt)
            return;
          auto e = from_caf(err);
          e.message = "chunk at offset " + std::to_string(offset) + ": " + e.message;
          attempt_failed(self, job, e);
        });
  }
}

/// The peer's entry is in: checks it, opens the temp file, starts the chunks.
void start_transfer(fetch_actor_ptr self, job_ptr job, layer_info info) {
  if (info.ref != job->ref || !layers::is_valid_digest(info.digest) || info.size_bytes <= 0
      || info.size_bytes > max_image_bytes)
    return attempt_failed(self, job,
                          internal_error("bad catalog entry for " + job->ref + ": ref \""
                                         + info.ref.substr(0, 200) + "\", digest \""
                                         + info.digest.substr(0, 80) + "\", "
                                         + std::to_string(info.size_bytes) + " bytes"));
  job->info = std::move(info);
  job->data_phase = false;
  job->data_digest.clear();
  job->size = static_cast<uint64_t>(job->info.size_bytes);
  job->slack = 0;
  begin_writing(self, job);
}

/// Opens a temp file for the current phase and starts the chunks.
void begin_writing(fetch_actor_ptr self, job_ptr job) {
  auto tmp = self->state.store->root() + "/tmp/fetch-" + random_name()
             + (job->data_phase ? ".blob" : ".erofs");
  auto attempt = job->attempt;
  run_blocking(self, *self->state.io,
               [tmp] { return layers::uring_writer::create(tmp, 2 * pipeline_depth); },
               [self, job, attempt, tmp](expected<layers::uring_writer>& w) {
                 if (attempt != job->attempt) {
                   ::unlink(tmp.c_str()); // cannot happen today: one attempt at a time
                   return;
                 }
                 if (!w)
                   return attempt_failed(self, job, w.err());
                 job->writer = std::make_shared<layers::uring_writer>(std::move(*w));
                 job->tmp = tmp;
                 job->next_offset = 0;
                 job->received = 0;
                 job->in_flight = 0;
                 if (job->size == 0)
                   return complete(self, job);
                 pump(self, job);
               });
}

void try_next(fetch_actor_ptr self, job_ptr job) {
  if (job->next >= job->candidates.size()) {
    ++self->state.fetch_failures_total;
    auto n = std::to_string(job->candidates.size());
    if (job->only_not_found)
      return finish_job(self, job,
                        not_found("layer " + job->ref + " not found in store "
                                  + self->state.store->root() + " nor at any of " + n
                                  + " other alive nodes"));
    std::string why;
    for (auto& f : job->failures)
      why += (why.empty() ? "" : "; ") + f;
    return finish_job(self, job,
                      unavailable("fetch layer " + job->ref + ": no node could serve it (" + why
                                  + ")"));
  }
  auto m = job->candidates[job->next++];
  job->peer_id = m.id;
  job->peer = nullptr;
  auto attempt = job->attempt;
  self->state.peers.with(self, m.id, m.address, connect_timeout,
                         [self, job, attempt](const placement_actor& peer, const error& err) {
    if (attempt != job->attempt)
      return;
    if (!peer)
      return attempt_failed(self, job, err);
    job->peer = peer;
    self->request(peer, caf::duration{info_timeout}, fetch_atom::value, job->ref)
      .then(
        [self, job, attempt](layer_info& info) {
          if (attempt == job->attempt)
            start_transfer(self, job, std::move(info));
        },
        [self, job, attempt](caf::error& e) {
          if (attempt == job->attempt)
            attempt_failed(self, job, from_caf(e));
        });
  });
}

void handle_fetch(fetch_actor_ptr self, const std::string& ref,
                  std::function<void(expected<layer_info>)> waiter) {
  if (auto parsed = layers::parse_ref(ref); !parsed)
    return waiter(parsed.err());
  auto& st = self->state;
  if (auto it = st.jobs.find(ref); it != st.jobs.end()) {
    it->second->waiters.push_back(std::move(waiter)); // one fetch per ref: wait for it
    return;
  }
  auto job = std::make_shared<fetch_job>();
  job->ref = ref;
  job->waiters.push_back(std::move(waiter));
  job->started = std::chrono::steady_clock::now();
  st.jobs[ref] = job;
  auto store = st.store;
  auto node_id = st.ctx->config.node_id;
  run_blocking(self, *st.io,
               [store, ref, node_id] { return layers::resolve_held(*store, ref, node_id); },
               [self, job](expected<layer_info>& local) {
                 if (local)
                   return finish_job(self, job, std::move(*local));
                 self->request(self->state.placement, caf::duration{local_wait},
                               nodes_atom::value)
                   .then(
                     [self, job](std::vector<member_info>& view) {
                       job->candidates =
                         layers::fetch_candidates(view, self->state.ctx->config.node_id, job->ref);
                       try_next(self, job);
                     },
                     [self, job](caf::error& e) { finish_job(self, job, from_caf(e)); });
               });
}

image_fetch_actor::behavior_type image_fetch_behavior(fetch_actor_ptr self, node_context_ptr ctx,
                                                      std::shared_ptr<sys::worker_pool> io) {
  auto& st = self->state;
  st.ctx = ctx;
  self->set_down_handler([self](caf::down_msg& dm) {
    self->state.peers.on_down(dm.source, self->home_system().render(dm.reason));
  });
  st.cache = ctx->layers ? ctx->layers->cache() : nullptr;
  if (st.cache)
    st.store = st.cache->store_ptr();
  else if (auto s = layers::store::open(ctx->config.store_dir); s)
    st.store = std::make_shared<layers::store>(std::move(*s));
  st.io = std::move(io);
  if (!st.store) {
    log(self) << "cannot open the layer store " << ctx->config.store_dir << "; not serving"
              << std::endl;
    self->quit(); // placement answers `unavailable` for what it would serve
    return image_fetch_actor::behavior_type::make_empty_behavior();
  }
  return {
    [self](fetch_atom, std::string& ref) -> caf::result<layer_info> {
      auto rp = self->make_response_promise();
      handle_fetch(self, ref, [rp](expected<layer_info> r) mutable {
        if (r)
          rp.deliver(*r);
        else
          rp.deliver(to_caf(r.err()));
      });
      return rp;
    },
    [self](fetch_atom, std::string& ref, fetch_waiter& w) { handle_fetch(self, ref, std::move(w.fn)); },
    // A peer's question: does this node hold `ref`?
    [self](info_atom, std::string& ref) -> caf::result<layer_info> {
      auto rp = self->make_response_promise();
      auto store = self->state.store;
      auto node_id = self->state.ctx->config.node_id;
      run_blocking(self, *self->state.io,
                   [store, ref, node_id] { return layers::resolve_held(*store, ref, node_id); },
                   [rp](expected<layer_info>& r) mutable {
                     if (r)
                       rp.deliver(*r);
                     else
                       rp.deliver(to_caf(r.err()));
                   });
      return rp;
    },
    // A peer reads part of an image this node holds.
    [self](blob_atom, std::string& digest, uint64_t offset,
           uint32_t len) -> caf::result<std::string> {
      auto rp = self->make_response_promise();
      auto store = self->state.store;
      run_blocking(self, *self->state.io,
                   [store, digest, offset, len] {
                     return layers::read_image_chunk(*store, digest, offset, len);
                   },
                   [rp](expected<std::string>& r) mutable {
                     if (r)
                       rp.deliver(std::move(*r));
                     else
                       rp.deliver(to_caf(r.err()));
                   });
      return rp;
    },
    [self](nodes_atom, placement_actor& front) { self->state.placement = std::move(front); },
    [self](cont_atom, continuation& c) { c.fn(); },
  };
}

} // namespace

image_fetch_actor spawn_image_fetch(caf::local_actor* parent, node_context_ptr ctx) {
  return parent->spawn<caf::monitored>(image_fetch_behavior, std::move(ctx),
                                       std::make_shared<sys::worker_pool>(io_threads));
}

image_fetch_actor spawn_image_fetch(caf::actor_system& sys, node_context_ptr ctx,
                                    std::shared_ptr<sys::worker_pool> io) {
  return sys.spawn(image_fetch_behavior, std::move(ctx), std::move(io));
}

layer_fetcher make_layer_fetcher(image_fetch_actor fetch) {
  // A promise, not a scoped_actor: a blocking actor made on a worker thread
  // kept the actor system from shutting down (seen with CAF 0.17.6).
  return [fetch](const std::string& ref) -> expected<layer_info> {
    using result = expected<layer_info>;
    auto done = std::make_shared<std::promise<result>>();
    auto answer = done->get_future();
    caf::anon_send(fetch, fetch_atom::value, ref,
                   fetch_waiter{[done](result r) { done->set_value(std::move(r)); }});
    done.reset(); // the actor's copy is now the only one: dropped uncalled = broken
    if (answer.wait_for(waiter_timeout) != std::future_status::ready)
      return error{errc::timeout, "fetch layer " + ref + ": no answer within "
                                    + std::to_string(waiter_timeout.count() / 60'000) + " min"};
    try {
      return answer.get();
    } catch (const std::future_error&) {
      return unavailable("fetch layer " + ref + ": the image-fetch actor stopped");
    }
  };
}

} // namespace dsec
