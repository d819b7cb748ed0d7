// libcurl under the registry client (see http_transport.hpp). One easy handle
// per exchange, taken from a small pool (curl_easy_reset keeps a handle's
// connection cache, so consecutive requests to one registry reuse a TLS
// session). The extra CA file is appended to the system bundle and handed
// over as a blob: CURLOPT_CAINFO alone would replace the system CAs.
#include "registry/http_transport.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <sstream>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

namespace dsec::registry {

namespace {

constexpr size_t max_error_body = 64u << 10;
// Each idle handle keeps its connection open: the lazy blob daemon reads on
// up to 32 FUSE threads, and a handle freed past this bound would close its
// connection, so the next range request would open a new one (a new TCP, and
// TLS, handshake on a registry that is already the bottleneck).
constexpr size_t max_idle_handles = 64;
constexpr const char* system_bundles[] = {
  "/etc/ssl/certs/ca-certificates.crt",  // Debian, Ubuntu
  "/etc/pki/tls/certs/ca-bundle.crt",    // Fedora, RHEL
  "/etc/ssl/cert.pem",                   // Alpine, macOS
};

std::once_flag global_init;

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

std::string hex_digest(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  static const char* hex = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

/// The state the curl callbacks share for one exchange.
struct exchange {
  const http_request* req;
  http_response* resp;
  CURL* h;
  EVP_MD_CTX* md;
  uint64_t seen = 0;  ///< 2xx body bytes received (before skip/take)
  bool too_large = false;
  bool write_failed = false;
  int write_errno = 0;
};

long status_of(CURL* h) {
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

size_t on_body(char* data, size_t size, size_t n, void* userp) {
  auto& x = *static_cast<exchange*>(userp);
  size_t len = size * n;
  long code = status_of(x.h);
  if (code < 200 || code >= 300) {
    if (x.resp->body.size() < max_error_body)
      x.resp->body.append(data, std::min(len, max_error_body - x.resp->body.size()));
    return len;
  }
  // A 200 answer to a Range request carries the whole blob: keep the range.
  const char* p = data;
  size_t keep = len;
  if (code == 200 && (x.req->skip > 0 || x.req->take != UINT64_MAX)) {
    uint64_t start = x.seen, end = x.seen + len;
    x.seen = end;
    uint64_t lo = std::max<uint64_t>(start, x.req->skip);
    uint64_t hi = std::min<uint64_t>(end, x.req->skip + x.req->take);
    if (hi <= lo)
      return start >= x.req->skip + x.req->take ? 0 : len;  // 0: we have the range
    p = data + (lo - start);
    keep = static_cast<size_t>(hi - lo);
  }
  if (x.req->fd >= 0) {
    size_t off = 0;
    while (off < keep) {
      ssize_t w = ::write(x.req->fd, p + off, keep - off);
      if (w < 0) {
        if (errno == EINTR)
          continue;
        x.write_failed = true;
        x.write_errno = errno;
        return 0;
      }
      off += static_cast<size_t>(w);
    }
  } else {
    if (x.resp->body.size() + keep > x.req->max_body) {
      x.too_large = true;
      return 0;
    }
    if (x.req->reserve_body && x.resp->body.empty())
      x.resp->body.reserve(x.req->max_body);
    x.resp->body.append(p, keep);
  }
  if (x.md)
    EVP_DigestUpdate(x.md, p, keep);
  x.resp->body_bytes += keep;
  if (x.req->progress)
    x.req->progress(x.resp->body_bytes);
  return len;
}

size_t on_header(char* data, size_t size, size_t n, void* userp) {
  auto& x = *static_cast<exchange*>(userp);
  size_t len = size * n;
  std::string line(data, len);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n'))
    line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {
    // A new answer (after a redirect or a 100): forget the previous headers.
    x.resp->content_type.clear();
    x.resp->docker_digest.clear();
    x.resp->www_authenticate.clear();
    x.resp->location.clear();
    x.resp->content_range.clear();
    return len;
  }
  auto colon = line.find(':');
  if (colon == std::string::npos)
    return len;
  std::string name = line.substr(0, colon);
  for (auto& c : name)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string value = line.substr(colon + 1);
  while (!value.empty() && value.front() == ' ')
    value.erase(value.begin());
  if (name == "content-type")
    x.resp->content_type = value;
  else if (name == "docker-content-digest")
    x.resp->docker_digest = value;
  else if (name == "www-authenticate" && x.resp->www_authenticate.empty())
    x.resp->www_authenticate = value;
  else if (name == "location")
    x.resp->location = value;
  else if (name == "content-range")
    x.resp->content_range = value;
  return len;
}

struct slist_deleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
struct file_closer {
  void operator()(FILE* f) const { std::fclose(f); }
};
struct md_deleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

} // namespace

expected<std::shared_ptr<http_transport>> http_transport::open(
    const std::string& ca_file, std::chrono::milliseconds stall_timeout) {
  std::call_once(global_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::shared_ptr<http_transport> t(new http_transport());
  t->stall_timeout_ = stall_timeout;
  if (!ca_file.empty()) {
    std::string extra;
    if (!read_file(ca_file, extra))
      return invalid_argument("--registry-ca " + ca_file + ": cannot read it");
    if (extra.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
      return invalid_argument("--registry-ca " + ca_file + ": holds no PEM certificate");
    std::string system;
    for (const char* p : system_bundles)
      if (read_file(p, system))
        break;
    t->ca_bundle_ = system + "\n" + extra + "\n";
  }
  return t;
}

http_transport::~http_transport() {
  for (void* h : idle_)
    curl_easy_cleanup(static_cast<CURL*>(h));
}

void* http_transport::acquire() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      curl_easy_reset(static_cast<CURL*>(h));
      return h;
    }
  }
  return curl_easy_init();
}

void http_transport::release(void* h) {
  std::lock_guard<std::mutex> lk(mu_);
  if (idle_.size() < max_idle_handles)
    idle_.push_back(h);
  else
    curl_easy_cleanup(static_cast<CURL*>(h));
}

http_response http_transport::perform(const http_request& req) {
  http_response resp;
  auto* h = static_cast<CURL*>(acquire());
  if (h == nullptr) {
    resp.transport_error = "curl_easy_init failed";
    resp.transport_code = errc::internal;
    return resp;
  }
  std::unique_ptr<EVP_MD_CTX, md_deleter> md(EVP_MD_CTX_new());
  EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr);
  if (req.fd >= 0) {
    // Each attempt (auth retry, next mirror) starts the file over.
    if (::ftruncate(req.fd, 0) != 0 || ::lseek(req.fd, 0, SEEK_SET) != 0) {
      resp.transport_error = std::string("truncate download file: ") + std::strerror(errno);
      resp.transport_code = errc::internal;
      release(h);
      return resp;
    }
  }
  exchange x{&req, &resp, h, req.hash_body ? md.get() : nullptr};
  char errbuf[CURL_ERROR_SIZE] = {0};

  curl_slist* raw = nullptr;
  for (const auto& hd : req.headers)
    raw = curl_slist_append(raw, hd.c_str());
  if (!req.authorization.empty())
    raw = curl_slist_append(raw, ("Authorization: " + req.authorization).c_str());
  raw = curl_slist_append(raw, "Expect:");
  std::unique_ptr<curl_slist, slist_deleter> headers(raw);

  long stall_s = std::max<long>(1, static_cast<long>(stall_timeout_.count() / 1000));
  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "dsec/0.1");
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR,
                   req.allow_http_redirect ? "http,https" : "https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, req.follow ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(h, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(stall_timeout_.count()));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall_s);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_blob ca{};
  if (!ca_bundle_.empty()) {
    ca.data = const_cast<char*>(ca_bundle_.data());
    ca.len = ca_bundle_.size();
    ca.flags = CURL_BLOB_NOCOPY;
    curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);

  std::unique_ptr<FILE, file_closer> upload;
  if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (!req.body_file.empty()) {
    upload.reset(std::fopen(req.body_file.c_str(), "rb"));
    if (!upload) {
      resp.transport_error = "open " + req.body_file + ": " + std::strerror(errno);
      resp.transport_code = errc::internal;
      release(h);
      return resp;
    }
    std::fseek(upload.get(), 0, SEEK_END);
    long size = std::ftell(upload.get());
    std::fseek(upload.get(), 0, SEEK_SET);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READDATA, upload.get());
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size));
    if (req.method != "PUT")
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  } else if (req.method == "PUT" || req.method == "POST") {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    if (req.method == "PUT")
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
  } else if (req.method != "GET") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  if (char* eff = nullptr; curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff)
    resp.effective_url = eff;
  curl_easy_getinfo(h, CURLINFO_REDIRECT_COUNT, &resp.redirects);
  if (rc != CURLE_OK) {
    std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    if (x.too_large) {
      resp.transport_code = errc::too_large;
      why = "body larger than " + std::to_string(req.max_body) + " bytes";
    } else if (x.write_failed) {
      resp.transport_code = errc::internal;
      why = std::string("write download file: ") + std::strerror(x.write_errno);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
      resp.transport_code = errc::timeout;
      why = "no progress for " + std::to_string(stall_s) + " s (" + why + ")";
    } else if (resp.status == 416) {
      // Distribution announces the whole blob's length with its 416 and then
      // sends a short error text: the answer is the 416, not a cut transfer.
      rc = CURLE_OK;
    } else if (rc == CURLE_WRITE_ERROR && req.take != UINT64_MAX) {
      rc = CURLE_OK;  // we stopped a 200 answer to a Range request once we had the range
    } else {
      resp.transport_code = errc::unavailable;
      resp.tls_failure = rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                         rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_SSL_CERTPROBLEM;
    }
    if (rc != CURLE_OK) {
      resp.status = 0;
      resp.transport_error = why;
    }
  }
  if (req.hash_body)
    resp.body_digest = hex_digest(md.get());
  release(h);
  return resp;
}

} // namespace dsec::registry
