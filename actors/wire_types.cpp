// Wire type registration (see wire_types.hpp).
#include "actors/wire_types.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/caf_error.hpp"
#include "core/error.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"
#include "core/session_inspect.hpp"
#include "core/port_route.hpp"

namespace dsec {

void add_wire_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<network_policy>("dsec::network_policy");
  cfg.add_message_type<protect_policy>("dsec::protect_policy");
  cfg.add_message_type<sandbox_spec>("dsec::sandbox_spec");
  cfg.add_message_type<exec_request>("dsec::exec_request");
  cfg.add_message_type<exec_result>("dsec::exec_result");
  cfg.add_message_type<exec_chunk>("dsec::exec_chunk");
  cfg.add_message_type<denial_counts>("dsec::denial_counts");
  cfg.add_message_type<fncall_request>("dsec::fncall_request");
  cfg.add_message_type<snapshot_info>("dsec::snapshot_info");
  cfg.add_message_type<sandbox_metric>("dsec::sandbox_metric");
  cfg.add_message_type<sandbox_info>("dsec::sandbox_info");
  cfg.add_message_type<std::vector<sandbox_info>>("std::vector<dsec::sandbox_info>");
  cfg.add_message_type<layer_info>("dsec::layer_info");
  cfg.add_message_type<std::vector<layer_info>>("std::vector<dsec::layer_info>");
  cfg.add_message_type<backend_status>("dsec::backend_status");
  cfg.add_message_type<node_status>("dsec::node_status");
  cfg.add_message_type<member_info>("dsec::member_info");
  cfg.add_message_type<std::vector<member_info>>("std::vector<dsec::member_info>");
  cfg.add_message_type<std::map<std::string, std::string>>("std::map<std::string,std::string>");
  cfg.add_message_type<process_info>("dsec::process_info");
  cfg.add_message_type<std::vector<process_info>>("std::vector<dsec::process_info>");
  cfg.add_message_type<background_process>("dsec::background_process");
  cfg.add_message_type<job_item_error>("dsec::job_item_error");
  cfg.add_message_type<std::vector<job_item_error>>("std::vector<dsec::job_item_error>");
  cfg.add_message_type<job_result>("dsec::job_result");
  cfg.add_message_type<fs_entry>("dsec::fs_entry");
  cfg.add_message_type<std::vector<fs_entry>>("std::vector<dsec::fs_entry>");
  cfg.add_message_type<session_info>("dsec::session_info");
  cfg.add_message_type<std::vector<session_info>>("std::vector<dsec::session_info>");
  cfg.add_message_type<port_route>("dsec::port_route");
  cfg.add_error_category(dsec_error_category(),
                         [](uint8_t code, caf::atom_value, const caf::message& ctx) {
                           return "dsec: " + std::string{to_string(static_cast<errc>(code))}
                                  + " " + caf::to_string(ctx);
                         });
}

void configure_native_protocol(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(10)});
  // Deserialize on the multiplexer thread instead of handing each message to
  // a BASP worker thread: one thread wake-up less per message received.
  cfg.set("middleman.workers", size_t{0});
  cfg.load<caf::io::middleman>();
  add_wire_types(cfg);
}

} // namespace dsec
