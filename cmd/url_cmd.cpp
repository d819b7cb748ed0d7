// The url CLI verb (see url_cmd.hpp). It asks the node for the sandbox (a
// 404 for an unknown one), then prints the path form on the address it
// used: any peer of a cluster relays a port request to the owner.
#include "cmd/url_cmd.hpp"

#include <cctype>
#include <cstdlib>
#include <iostream>

#include "cmd/args.hpp"
#include "cmd/rest_call.hpp"
#include "core/host_port.hpp"
#include "core/json_codec.hpp"

namespace dsec::cli {

namespace {

const char* text = "dsec url ID PORT [--domain DOMAIN] [--rest HOST:PORT]";
const char* help =
  "Prints the URL that reaches TCP PORT (1-65535) inside sandbox ID through the node's\n"
  "REST port: http://REST/v1/sandboxes/ID/ports/PORT/ (any peer of a cluster serves it;\n"
  "HTTP, streamed answers and WebSocket pass through; send the node's API key as for\n"
  "any REST call). With --domain (the node's --sandbox-domain), E2B's host form\n"
  "http://PORT-ID.DOMAIN/ instead.\n"
  "  --rest HOST:PORT   the node (default $DSEC_REST, else 127.0.0.1:7070)\n";

int usage(const std::string& msg) {
  std::cerr << "dsec url: " << msg << "\nusage: " << text << "\n";
  return 2;
}

std::string encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~')
      out += static_cast<char>(ch);
    else
      out += '%', out += hex[ch >> 4], out += hex[ch & 15];
  }
  return out;
}

} // namespace

bool is_url_command(const std::string& cmd) { return cmd == "url"; }

int run_url_command(const std::string&, const std::vector<std::string>& words) {
  auto a = parse_args(words, {"rest", "domain"}, {"help"});
  if (a && a->has("help")) {
    std::cout << "usage: " << text << "\n" << help;
    return 0;
  }
  if (!a || a->positional.size() != 2)
    return usage(a ? "need a sandbox id and a port" : a.err().message);
  auto& id = a->positional[0];
  auto& port_text = a->positional[1];
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != 0 || port < 1 || port > 65535)
    return usage("port \"" + port_text + "\": must be a number between 1 and 65535");
  auto res = rest_call(*a, "GET", "/v1/sandboxes/" + encode(id));
  if (!res)
    return fail("url", res.err());
  auto port_s = std::to_string(port);
  if (a->has("domain")) {
    std::cout << "http://" << port_s << "-" << id << "." << a->get("domain") << "/\n";
    return 0;
  }
  auto addr = a->get("rest", ::getenv("DSEC_REST") ? ::getenv("DSEC_REST") : "127.0.0.1:7070");
  std::cout << "http://" << addr << "/v1/sandboxes/" << encode(id) << "/ports/" << port_s << "/\n";
  return 0;
}

} // namespace dsec::cli
