// The registry client over http_transport (see registry_client.hpp): the
// URLs of the distribution API v2, the auth dance (a 401 with a Bearer
// challenge fetches a token for the scope and retries once; a Basic
// challenge retries with the credentials), mirrors tried in order before the
// registry for reads, digest checks, and errors that name the registry, the
// repository or reference and the HTTP status.
#include "registry/registry_client.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "layers/digest.hpp"
#include "registry/auth.hpp"
#include "registry/byteranges.hpp"
#include "registry/http_transport.hpp"
#include "registry/manifest.hpp"
#include "registry/storage_locations.hpp"

namespace dsec::registry {

namespace {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

/// "CODE: message" of the distribution error body, or "" if none.
std::string registry_error_text(const std::string& body) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return {};
  auto errs = doc.find("errors");
  if (errs == doc.end() || !errs->is_array() || errs->empty() || !(*errs)[0].is_object())
    return {};
  const auto& e = (*errs)[0];
  std::string out = e.value("code", std::string());
  auto msg = e.value("message", std::string());
  if (!msg.empty())
    out += (out.empty() ? "" : ": ") + msg;
  return out;
}

bool has_error_code(const std::string& body, const char* code) {
  return registry_error_text(body).rfind(code, 0) == 0;
}

std::string host_of_url(const std::string& url) {
  auto p = url.find("://");
  auto rest = p == std::string::npos ? url : url.substr(p + 3);
  return rest.substr(0, rest.find('/'));
}

std::string percent_digest(const std::string& d) {
  std::string out;
  for (char c : d)
    out += c == ':' ? std::string("%3A") : std::string(1, c);
  return out;
}

class curl_registry_client final : public registry_client {
 public:
  curl_registry_client(std::string registry, registry_options opts,
                       std::shared_ptr<http_transport> transport, std::string cred_file,
                       std::string cred_text)
      : registry_(std::move(registry)), opts_(std::move(opts)), http_(std::move(transport)),
        cred_file_(std::move(cred_file)), cred_text_(std::move(cred_text)) {}

  // -- manifests ----------------------------------------------------------------

  expected<manifest_body> get_manifest(const std::string& repo, const std::string& ref) override {
    auto what = repo + (ref.rfind("sha256:", 0) == 0 ? "@" : ":") + ref;
    return over_read_hosts<manifest_body>([&](const std::string& host) -> expected<manifest_body> {
      http_request req;
      req.url = url(host, "/v2/" + repo + "/manifests/" + ref);
      req.headers.push_back("Accept: " + manifest_accept_header());
      req.max_body = opts_.max_manifest_bytes;
      auto r = call(host, repo, false, req);
      if (!r)
        return r.err();
      if (auto e = answer_error(*r, host, "manifest " + what, {200}))
        return *e;
      manifest_body out{r->content_type, r->body_digest, std::move(r->body)};
      if (!r->docker_digest.empty() && r->docker_digest != out.digest &&
          layers::is_valid_digest(r->docker_digest))
        return invalid_argument("registry " + host + ": manifest " + what +
                                " has digest " + out.digest + " but the registry says " +
                                r->docker_digest);
      if (ref.rfind("sha256:", 0) == 0 && ref != out.digest)
        return invalid_argument("registry " + host + ": manifest " + what +
                                ": digest mismatch, the body hashes to " + out.digest);
      return out;
    });
  }

  expected<std::string> head_manifest(const std::string& repo, const std::string& ref) override {
    auto what = repo + (ref.rfind("sha256:", 0) == 0 ? "@" : ":") + ref;
    return over_read_hosts<std::string>([&](const std::string& host) -> expected<std::string> {
      http_request req;
      req.method = "HEAD";
      req.url = url(host, "/v2/" + repo + "/manifests/" + ref);
      req.headers.push_back("Accept: " + manifest_accept_header());
      auto r = call(host, repo, false, req);
      if (!r)
        return r.err();
      if (auto e = answer_error(*r, host, "manifest " + what, {200}))
        return *e;
      if (!layers::is_valid_digest(r->docker_digest))
        return invalid_argument("registry " + host + ": HEAD of manifest " + what +
                                " gave no Docker-Content-Digest");
      return r->docker_digest;
    });
  }

  expected<std::string> put_manifest(const std::string& repo, const std::string& ref,
                                     const std::string& media_type,
                                     const std::string& body) override {
    http_request req;
    req.method = "PUT";
    req.url = url(registry_, "/v2/" + repo + "/manifests/" + ref);
    req.headers.push_back("Content-Type: " + media_type);
    req.body = body;
    auto r = call(registry_, repo, true, req);
    if (!r)
      return r.err();
    if (auto e = answer_error(*r, registry_, "put manifest " + repo + ":" + ref, {200, 201}))
      return *e;
    auto digest = layers::sha256_string(body);
    if (!r->docker_digest.empty() && r->docker_digest != digest)
      return invalid_argument("registry " + registry_ + ": stored manifest " + repo + ":" + ref +
                              " as " + r->docker_digest + ", not " + digest);
    return digest;
  }

  expected<std::string> get_referrers(const std::string& repo, const std::string& digest,
                                      const std::string& artifact_type) override {
    http_request req;
    std::string path = "/v2/" + repo + "/referrers/" + digest;
    if (!artifact_type.empty())
      path += "?artifactType=" + artifact_type;
    req.url = url(registry_, path);
    req.headers.push_back(std::string("Accept: ") + oci_index_type);
    req.max_body = opts_.max_manifest_bytes;
    auto r = call(registry_, repo, false, req);
    if (!r)
      return r.err();
    if (auto e = answer_error(*r, registry_, "referrers of " + repo + "@" + digest, {200}))
      return *e;
    return std::move(r->body);
  }

  // -- blobs --------------------------------------------------------------------

  status get_blob_to_file(const std::string& repo, const std::string& digest, int64_t size,
                          const std::string& path,
                          const std::function<void(uint64_t)>& progress) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
      return sys_error("create", path, errno);
    auto what = "blob " + repo + "@" + digest;
    auto r = over_read_hosts<bool>([&](const std::string& host) -> expected<bool> {
      http_request req;
      req.url = url(host, "/v2/" + repo + "/blobs/" + digest);
      req.follow = true;
      req.allow_http_redirect = is_insecure(opts_, host);
      req.fd = fd;
      req.progress = progress;
      auto a = call(host, repo, false, req);
      if (!a)
        return a.err();
      if (auto e = answer_error(*a, host, what, {200}))
        return *e;
      if (size >= 0 && a->body_bytes != static_cast<uint64_t>(size))
        return invalid_argument("registry " + host + ": " + what + " has " +
                                std::to_string(a->body_bytes) + " bytes, the manifest says " +
                                std::to_string(size));
      if (a->body_digest != digest)
        return invalid_argument("registry " + host + ": " + what +
                                ": digest mismatch, the bytes hash to " + a->body_digest);
      return true;
    });
    ::close(fd);
    if (!r) {
      ::unlink(path.c_str());
      return r.err();
    }
    return {};
  }

  expected<std::string> get_blob(const std::string& repo, const std::string& digest,
                                 size_t max_bytes) override {
    auto what = "blob " + repo + "@" + digest;
    return over_read_hosts<std::string>([&](const std::string& host) -> expected<std::string> {
      http_request req;
      req.url = url(host, "/v2/" + repo + "/blobs/" + digest);
      req.follow = true;
      req.allow_http_redirect = is_insecure(opts_, host);
      req.max_body = max_bytes;
      auto a = call(host, repo, false, req);
      if (!a)
        return a.err();
      if (auto e = answer_error(*a, host, what, {200}))
        return *e;
      if (a->body_digest != digest)
        return invalid_argument("registry " + host + ": " + what +
                                ": digest mismatch, the bytes hash to " + a->body_digest);
      return std::move(a->body);
    });
  }

  expected<std::string> get_blob_range(const std::string& repo, const std::string& digest,
                                       uint64_t offset, uint32_t len) override {
    auto what = "blob " + repo + "@" + digest + " range " + std::to_string(offset) + "+" +
                std::to_string(len);
    if (len == 0)
      return std::string();
    return over_read_hosts<std::string>([&](const std::string& host) -> expected<std::string> {
      http_request req;
      req.url = url(host, "/v2/" + repo + "/blobs/" + digest);
      req.follow = true;
      req.allow_http_redirect = is_insecure(opts_, host);
      req.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                            std::to_string(offset + len - 1));
      req.max_body = len;
      req.skip = offset;
      req.take = len;
      req.hash_body = false;
      req.reserve_body = true;
      auto a = ranged_get(host, repo, digest, std::move(req));
      if (!a)
        return a.err();
      if (a->status == 416)
        return std::string();  // past the end
      if (auto e = answer_error(*a, host, what, {200, 206}))
        return *e;
      return std::move(a->body);
    });
  }

  expected<std::vector<std::string>> get_blob_ranges(
    const std::string& repo, const std::string& digest,
    const std::vector<byte_range>& ranges) override {
    if (ranges.size() == 1) {
      auto one = get_blob_range(repo, digest, ranges[0].offset, ranges[0].len);
      if (!one)
        return one.err();
      return std::vector<std::string>{std::move(*one)};
    }
    auto what = "blob " + repo + "@" + digest + " " + std::to_string(ranges.size()) + " ranges";
    uint64_t total = 0;
    for (const auto& r : ranges)
      total += r.len;
    using parts = std::vector<std::string>;
    return over_read_hosts<parts>([&](const std::string& host) -> expected<parts> {
      http_request req;
      req.url = url(host, "/v2/" + repo + "/blobs/" + digest);
      req.follow = true;
      req.allow_http_redirect = is_insecure(opts_, host);
      req.headers.push_back("Range: " + range_header_value(ranges));
      // The ranges and each part's headers; a whole blob instead fails early.
      req.max_body = total + 256 * ranges.size() + 1024;
      req.hash_body = false;
      req.reserve_body = true;
      auto a = ranged_get(host, repo, digest, std::move(req));
      if (!a)
        return a.err();
      if (auto e = answer_error(*a, host, what, {206}))
        return *e;
      auto got = split_byteranges(a->body, a->content_type, a->content_range, ranges);
      if (!got)
        return error{got.err().code, "registry " + host + ": " + what + ": " + got.err().message};
      return got;
    });
  }

  expected<bool> has_blob(const std::string& repo, const std::string& digest) override {
    http_request req;
    req.method = "HEAD";
    req.url = url(registry_, "/v2/" + repo + "/blobs/" + digest);
    req.follow = true;
    req.allow_http_redirect = is_insecure(opts_, registry_);
    auto a = call(registry_, repo, true, req);
    if (!a)
      return a.err();
    if (a->status == 404)
      return false;
    if (auto e = answer_error(*a, registry_, "blob " + repo + "@" + digest, {200}))
      return *e;
    return true;
  }

  status push_blob_file(const std::string& repo, const std::string& digest,
                        const std::string& path) override {
    return push(repo, digest, nullptr, &path);
  }

  status push_blob(const std::string& repo, const std::string& digest,
                   const std::string& data) override {
    return push(repo, digest, &data, nullptr);
  }

  // -- observers ------------------------------------------------------------------

  transfer_stats stats() const override {
    return {requests_.load(), bytes_in_.load(), bytes_out_.load(), storage_reads_.load()};
  }
  const std::string& registry() const override { return registry_; }

 private:
  /// The host requests for `host` go to (docker.io's API lives elsewhere).
  static std::string wire_host(const std::string& host) {
    return host == "docker.io" ? std::string("registry-1.docker.io") : host;
  }

  std::string url(const std::string& host, const std::string& path) const {
    return (is_insecure(opts_, host) ? "http://" : "https://") + wire_host(host) + path;
  }

  /// Runs `op` against each mirror of the registry, then the registry; the
  /// first success wins, else the registry's own error.
  template <class T, class F>
  expected<T> over_read_hosts(F&& op) {
    if (auto it = opts_.mirrors.find(registry_); it != opts_.mirrors.end())
      for (const auto& m : it->second)
        if (auto r = op(m); r)
          return r;
    return op(registry_);
  }

  /// The credentials for `host` from the config file, looked up once.
  expected<std::optional<credentials>> creds_for(const std::string& host) {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = creds_.find(host); it != creds_.end())
      return it->second;
    std::optional<credentials> c;
    if (!cred_text_.empty()) {
      auto found = find_credentials(cred_text_, cred_file_, host);
      if (!found)
        return found.err();
      c = *found;
    }
    creds_[host] = c;
    return c;
  }

  /// The Authorization to send first: a cached token for the scope, Basic
  /// for a host that asked for it before, else none.
  std::string cached_auth(const std::string& host, const std::string& scope) {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = tokens_.find(host + " " + scope); it != tokens_.end()) {
      if (steady::now() < it->second.second)
        return "Bearer " + it->second.first;
      tokens_.erase(it);
    }
    if (auto it = basic_.find(host); it != basic_.end())
      return it->second;
    return {};
  }

  /// One exchange with auth: answers a 401 challenge once (a token, or Basic).
  expected<http_response> call(const std::string& host, const std::string& repo, bool push,
                               http_request req) {
    std::string scope = "repository:" + repo + (push ? ":pull,push" : ":pull");
    req.authorization = cached_auth(host, scope);
    auto r = perform(req);
    if (r.status != 401 || r.www_authenticate.empty())
      return r;
    auto challenges = parse_challenges(r.www_authenticate);
    if (!challenges)
      return invalid_argument("registry " + host + " answered 401 with a malformed challenge: " +
                              challenges.err().message);
    auto cr = creds_for(host);
    if (!cr)
      return cr.err();
    const auth_challenge* bearer = nullptr;
    const auth_challenge* basic = nullptr;
    for (const auto& c : *challenges) {
      if (c.scheme == "bearer" && !bearer)
        bearer = &c;
      if (c.scheme == "basic" && !basic)
        basic = &c;
    }
    if (bearer) {
      auto token = fetch_token(host, *bearer, scope, *cr);
      if (!token)
        return token.err();
      req.authorization = "Bearer " + *token;
    } else if (basic && *cr && req.authorization.rfind("Basic ", 0) != 0) {
      req.authorization = basic_authorization(**cr);
      std::lock_guard<std::mutex> lk(mu_);
      basic_[host] = req.authorization;
    } else {
      return r;  // answer_error words the 401
    }
    return perform(req);
  }

  expected<std::string> fetch_token(const std::string& host, const auth_challenge& bearer,
                                    const std::string& scope,
                                    const std::optional<credentials>& cr) {
    auto turl = token_url(bearer, scope);
    if (!turl)
      return invalid_argument("registry " + host + ": " + turl.err().message);
    auto realm_host = host_of_url(bearer.param("realm"));
    if (turl->rfind("http://", 0) == 0 && !is_insecure(opts_, host) &&
        !is_insecure(opts_, realm_host))
      return invalid_argument("registry " + host + ": token realm " + bearer.param("realm") +
                              " is plain HTTP; name " + realm_host +
                              " with --insecure-registry to allow it");
    http_request req;
    req.url = *turl;
    req.max_body = 1u << 20;
    if (cr)
      req.authorization = basic_authorization(*cr);
    auto r = perform(req);
    if (r.status == 0)
      return error(r.transport_code, "registry " + host + ": token server " +
                                         bearer.param("realm") + ": " + r.transport_error);
    if (r.status == 401 || r.status == 403)
      return invalid_argument(
          "registry " + host + ": token server " + bearer.param("realm") + " answered " +
          std::to_string(r.status) + " for scope " + scope +
          (cr ? ": credentials of user \"" + cr->username + "\" were rejected"
              : ": it needs credentials (--registry-auth or $DOCKER_CONFIG/config.json)"));
    if (r.status != 200)
      return unavailable("registry " + host + ": token server " + bearer.param("realm") +
                         " answered " + std::to_string(r.status));
    auto t = parse_token_answer(r.body);
    if (!t)
      return invalid_argument("registry " + host + ": " + t.err().message);
    std::lock_guard<std::mutex> lk(mu_);
    // Renew 10 s early so a token does not expire on the wire.
    tokens_[host + " " + scope] = {
        t->token, steady::now() + std::chrono::seconds(std::max<int64_t>(t->expires_in - 10, 1))};
    return t->token;
  }

  /// A ranged GET of blob `digest`: to its storage location when one is
  /// known (no credentials: the URL is the grant), else through the
  /// registry, remembering where a redirect led. An answer other than the
  /// ranges from the location (an expired or revoked URL, storage down)
  /// forgets it and asks the registry at once.
  expected<http_response> ranged_get(const std::string& host, const std::string& repo,
                                     const std::string& digest, http_request req) {
    if (auto loc = locations_.find(host, digest)) {
      http_request direct = req;
      direct.url = *loc;
      auto r = perform(direct);
      if (r.status == 206 || r.status == 200 || r.status == 416) {
        ++storage_reads_;
        return r;
      }
      locations_.forget(host, digest);
    }
    auto r = call(host, repo, false, req);
    if (r && (r->status == 206 || r->status == 200) && r->redirects > 0 &&
        !r->effective_url.empty())
      locations_.remember(host, digest, r->effective_url);
    return r;
  }

  http_response perform(const http_request& req) {
    auto r = http_->perform(req);
    ++requests_;
    bytes_in_ += r.body_bytes;
    if (r.status >= 200 && r.status < 300)
      bytes_out_ += req.body.size();
    return r;
  }

  /// The error for an answer whose status is not in `ok`, or nullopt.
  std::optional<error> answer_error(const http_response& r, const std::string& host,
                                    const std::string& what, std::initializer_list<long> ok) {
    for (long s : ok)
      if (r.status == s)
        return std::nullopt;
    std::string head = "registry " + host + ": " + what + ": ";
    if (r.status == 0) {
      std::string msg = head + r.transport_error;
      if (r.tls_failure)
        msg += " (TLS certificate check failed: trust the registry's CA with --registry-ca, or "
               "name the host with --insecure-registry if it speaks plain HTTP)";
      return error(r.transport_code == errc::none ? errc::unavailable : r.transport_code, msg);
    }
    std::string detail = registry_error_text(r.body);
    std::string status = "HTTP " + std::to_string(r.status) + (detail.empty() ? "" : " " + detail);
    if (r.status == 404)
      return not_found(head + "not found (" + status + ")");
    if (r.status == 401) {
      if (has_error_code(r.body, "NAME_UNKNOWN"))
        return not_found(head + "no such repository (" + status + ")");
      auto cr = creds_for(host);
      bool have = cr && *cr;
      if (r.www_authenticate.rfind("Bearer", 0) == 0 ||
          r.www_authenticate.rfind("bearer", 0) == 0)
        return not_found(head + "not found or not accessible with these credentials (" + status +
                         ")");
      return invalid_argument(
          "registry " + host + " answered 401 Unauthorized to " + what + ": " +
          (have ? "credentials of user \"" + (*cr)->username + "\" were rejected"
                : std::string("it needs credentials (--registry-auth or "
                              "$DOCKER_CONFIG/config.json)")) +
          (detail.empty() ? "" : " (" + detail + ")"));
    }
    if (r.status == 403)
      return invalid_argument(head + "access denied (" + status + ")");
    if (r.status == 429 || r.status >= 500)
      return unavailable(head + status);
    return invalid_argument(head + "unexpected answer (" + status + ")");
  }

  status push(const std::string& repo, const std::string& digest, const std::string* data,
              const std::string* path) {
    auto have = has_blob(repo, digest);
    if (!have)
      return have.err();
    if (*have)
      return {};
    auto what = "upload of blob " + repo + "@" + digest;
    http_request start;
    start.method = "POST";
    start.url = url(registry_, "/v2/" + repo + "/blobs/uploads/");
    auto r = call(registry_, repo, true, start);
    if (!r)
      return r.err();
    if (auto e = answer_error(*r, registry_, what, {202}))
      return *e;
    if (r->location.empty())
      return invalid_argument("registry " + registry_ + ": " + what + ": no Location in 202");
    std::string loc = r->location;
    if (loc.rfind("http://", 0) != 0 && loc.rfind("https://", 0) != 0)
      loc = url(registry_, loc.front() == '/' ? loc : "/" + loc);
    loc += (loc.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") +
           percent_digest(digest);
    http_request put;
    put.method = "PUT";
    put.url = loc;
    put.headers.push_back("Content-Type: application/octet-stream");
    if (data)
      put.body = *data;
    else
      put.body_file = *path;
    auto p = call(registry_, repo, true, put);
    if (!p)
      return p.err();
    if (auto e = answer_error(*p, registry_, what, {201, 204}))
      return *e;
    if (path) {
      struct stat sb {};
      if (::stat(path->c_str(), &sb) == 0)
        bytes_out_ += static_cast<uint64_t>(sb.st_size);
    }
    return {};
  }

  std::string registry_;
  registry_options opts_;
  std::shared_ptr<http_transport> http_;
  std::string cred_file_;
  std::string cred_text_;

  std::mutex mu_;
  std::map<std::string, std::optional<credentials>> creds_;
  /// "host scope" -> token and when to stop using it.
  std::map<std::string, std::pair<std::string, steady::time_point>> tokens_;
  /// host -> the Basic Authorization it asked for once.
  std::map<std::string, std::string> basic_;

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  std::atomic<uint64_t> storage_reads_{0};
  storage_locations locations_;
};

} // namespace

expected<std::shared_ptr<registry_client>> registry_client::open(const std::string& registry,
                                                                  const registry_options& opts) {
  if (registry.empty())
    return invalid_argument("registry client: no registry host");
  auto file = credentials_file(opts.auth_file);
  if (!file)
    return file.err();
  std::string text;
  if (!file->empty()) {
    std::ifstream in(*file, std::ios::binary);
    if (!in)
      return invalid_argument("registry credentials " + *file + ": cannot read it");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    // Parse now so a malformed file fails before any request.
    if (auto c = find_credentials(text, *file, registry); !c)
      return c.err();
  }
  auto transport = http_transport::open(opts.ca_file, opts.request_timeout);
  if (!transport)
    return transport.err();
  return std::shared_ptr<registry_client>(
      std::make_shared<curl_registry_client>(registry, opts, *transport, *file, text));
}

} // namespace dsec::registry
