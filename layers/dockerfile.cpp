// Dockerfile parsing and planning (see dockerfile.hpp). Pure: no files, no
// network; the driver (cmd/layer_build_cmd.cpp) runs the plan.
#include "layers/dockerfile.hpp"

#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "core/layer_config.hpp"

namespace dsec::layers::dockerfile {

namespace {

using vars_t = std::map<std::string, std::string>;

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return std::string(s.substr(b, e - b));
}

std::string upper(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

error at(int line, const std::string& keyword, const std::string& why) {
  return invalid_argument("Dockerfile line " + std::to_string(line) + ": " + keyword + ": " + why);
}

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string lookup(const vars_t& vars, const std::string& name) {
  auto it = vars.find(name);
  return it == vars.end() ? std::string{} : it->second;
}

// Expands the variable reference starting at text[i] == '$'; advances i past
// it. An unterminated ${ or a lone $ is kept literally.
std::string expand_ref(std::string_view text, size_t& i, const vars_t& vars) {
  if (i + 1 < text.size() && text[i + 1] == '{') {
    auto close = text.find('}', i + 2);
    if (close == std::string_view::npos) {
      ++i;
      return "$";
    }
    auto inner = std::string(text.substr(i + 2, close - i - 2));
    i = close + 1;
    auto op = inner.find(':');
    if (op == std::string::npos || op + 1 >= inner.size()
        || (inner[op + 1] != '-' && inner[op + 1] != '+'))
      return lookup(vars, inner);
    auto name = inner.substr(0, op);
    auto word = substitute(inner.substr(op + 2), vars);
    auto it = vars.find(name);
    bool set = it != vars.end() && !it->second.empty();
    if (inner[op + 1] == '-')
      return set ? it->second : word;
    return set ? word : std::string{};
  }
  size_t j = i + 1;
  if (j >= text.size() || !name_start(text[j])) {
    ++i;
    return "$";
  }
  while (j < text.size() && name_char(text[j]))
    ++j;
  auto name = std::string(text.substr(i + 1, j - i - 1));
  i = j;
  return lookup(vars, name);
}

// Shell-like words of `text`: quotes removed ('...' literal, "..." with
// \" \\ \$ escapes), backslash escapes outside quotes, variables expanded
// when `vars` is given. `split` false: one word, whitespace kept.
std::vector<std::string> lex(std::string_view text, const vars_t* vars, bool split = true) {
  std::vector<std::string> out;
  std::string cur;
  bool have = false;
  char quote = 0;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (quote == '\'') {
      if (c == '\'')
        quote = 0;
      else
        cur += c;
      ++i;
      continue;
    }
    if (c == '\\' && i + 1 < text.size()
        && (quote == 0 || text[i + 1] == '"' || text[i + 1] == '\\' || text[i + 1] == '$')) {
      cur += text[i + 1];
      have = true;
      i += 2;
      continue;
    }
    if (c == '$' && vars) {
      cur += expand_ref(text, i, *vars);
      have = true;
      continue;
    }
    if (quote == '"') {
      if (c == '"')
        quote = 0;
      else
        cur += c;
      ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      have = true;
      ++i;
      continue;
    }
    if (split && std::isspace(static_cast<unsigned char>(c))) {
      if (have)
        out.push_back(std::move(cur));
      cur.clear();
      have = false;
      ++i;
      continue;
    }
    cur += c;
    have = true;
    ++i;
  }
  if (have || !split)
    out.push_back(std::move(cur));
  return out;
}

// Leading `--flag[=value]` words of an instruction's args.
std::vector<std::string> leading_flags(const std::string& args) {
  std::vector<std::string> flags;
  size_t i = 0;
  while (i < args.size()) {
    while (i < args.size() && std::isspace(static_cast<unsigned char>(args[i])))
      ++i;
    if (args.compare(i, 2, "--") != 0)
      break;
    auto end = args.find_first_of(" \t", i);
    flags.push_back(args.substr(i, end == std::string::npos ? std::string::npos : end - i));
    i = end == std::string::npos ? args.size() : end;
  }
  return flags;
}

status refuse_flags(const instruction& in) {
  auto flags = leading_flags(in.args);
  if (flags.empty())
    return {};
  auto name = flags[0].substr(0, flags[0].find('='));
  return at(in.line, in.keyword, "option " + name + " is not supported"
                                     + (name == "--chown" || name == "--chmod"
                                          ? " (files are copied as root with their own modes;"
                                            " change them in a RUN)"
                                          : ""));
}

std::string join_path(const std::string& base, const std::string& p) {
  if (!p.empty() && p[0] == '/')
    return p;
  auto b = base.empty() ? std::string{"/"} : base;
  return b.back() == '/' ? b + p : b + "/" + p;
}

// Warnings for instructions a dsec layer has no place for.
const std::map<std::string, std::string>& recorded() {
  static const std::map<std::string, std::string> m = {
    {"CMD", "a dsec sandbox runs no main command (run it with exec)"},
    {"ENTRYPOINT", "a dsec sandbox runs no main command (run it with exec)"},
    {"EXPOSE", "every port of a sandbox is reachable through the node; nothing to declare"},
    {"LABEL", "layers carry no labels"},
    {"MAINTAINER", "layers carry no author"},
    {"STOPSIGNAL", "a dsec sandbox runs no main command to signal"},
    {"HEALTHCHECK", "a dsec sandbox runs no main command to check"},
  };
  return m;
}

const std::map<std::string, std::string>& refused() {
  static const std::map<std::string, std::string> m = {
    {"SHELL", "is not supported (RUN's shell form always uses /bin/sh -c)"},
    {"VOLUME", "is not supported (a dsec layer has no volumes)"},
    {"ONBUILD", "is not supported"},
  };
  return m;
}

} // namespace

std::string substitute(std::string_view text, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == '$') {
      out += '$';
      i += 2;
    } else if (text[i] == '$') {
      out += expand_ref(text, i, vars);
    } else {
      out += text[i++];
    }
  }
  return out;
}

expected<std::vector<instruction>> parse(std::string_view text) {
  std::vector<instruction> out;
  std::string pending;
  int start = 0, lineno = 0;
  bool directives = true; // parser directives: only before anything else
  size_t pos = 0;
  while (pos <= text.size()) {
    auto nl = text.find('\n', pos);
    auto raw = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++lineno;
    auto line = trim(raw);
    if (!line.empty() && line[0] == '#') {
      if (directives) {
        auto d = trim(std::string_view(line).substr(1));
        auto eq = d.find('=');
        if (eq != std::string::npos && upper(trim(d.substr(0, eq))) == "ESCAPE"
            && trim(d.substr(eq + 1)) != "\\")
          return at(lineno, "escape directive", "only the default escape character \\ is supported");
      }
      continue; // comments, also inside continued instructions
    }
    if (line.empty()) {
      directives = false;
      continue;
    }
    directives = false;
    if (pending.empty())
      start = lineno;
    bool cont = line.back() == '\\';
    if (cont)
      line.pop_back();
    pending += (pending.empty() ? "" : " ") + line;
    if (cont && pos <= text.size())
      continue;
    auto body = trim(pending);
    pending.clear();
    if (body.empty())
      continue;
    instruction in;
    in.line = start;
    auto sp = body.find_first_of(" \t");
    in.keyword = upper(body.substr(0, sp));
    in.args = sp == std::string::npos ? std::string{} : trim(body.substr(sp));
    if (!in.args.empty() && in.args[0] == '[') {
      auto j = nlohmann::json::parse(in.args, nullptr, false);
      if (!j.is_discarded() && j.is_array()) {
        bool strings = true;
        for (auto& e : j)
          strings = strings && e.is_string();
        if (strings) {
          in.json_form = true;
          for (auto& e : j)
            in.json.push_back(e.get<std::string>());
        }
      }
    }
    out.push_back(std::move(in));
  }
  return out;
}

expected<std::string> base_of(const std::vector<instruction>& ins,
                              const std::map<std::string, std::string>& build_args) {
  vars_t globals;
  for (auto& in : ins) {
    if (in.keyword == "ARG") {
      for (auto& w : lex(in.args, &globals)) {
        auto eq = w.find('=');
        auto name = w.substr(0, eq);
        auto given = build_args.find(name);
        globals[name] = given != build_args.end() ? given->second
                        : eq == std::string::npos ? std::string{}
                                                  : w.substr(eq + 1);
      }
      continue;
    }
    if (in.keyword != "FROM")
      return at(in.line, in.keyword, "the first instruction must be FROM (or ARG before it)");
    if (auto st = refuse_flags(in); !st)
      return st.err();
    auto words = lex(in.args, &globals);
    if (words.size() == 3 && upper(words[1]) == "AS")
      return at(in.line, "FROM", "\"AS " + words[2]
                                   + "\": multi-stage builds are not supported (one FROM)");
    if (words.size() != 1)
      return at(in.line, "FROM", "takes one image or layer reference");
    return words[0];
  }
  return invalid_argument("Dockerfile: no FROM instruction");
}

expected<plan> make_plan(const std::vector<instruction>& ins,
                         const std::map<std::string, std::string>& build_args,
                         const layer_config& base) {
  plan out;
  auto from = base_of(ins, build_args);
  if (!from)
    return from.err();
  out.from = *from;
  layer_config cfg = base;
  vars_t args;                         // ARGs declared after FROM
  std::set<std::string> declared;      // every ARG name, before FROM too
  bool seen_from = false;
  auto vars = [&] { // what substitution sees: ARG values under ENV
    auto v = args;
    for (auto& [k, val] : cfg.env)
      v[k] = val;
    return v;
  };
  for (auto& in : ins) {
    auto kw = in.keyword;
    if (!seen_from) {
      if (kw == "ARG")
        for (auto& w : lex(in.args, nullptr))
          declared.insert(w.substr(0, w.find('=')));
      if (kw == "FROM")
        seen_from = true;
      continue;
    }
    step st;
    st.line = in.line;
    if (kw == "FROM")
      return at(in.line, kw, "a second FROM: multi-stage builds are not supported");
    if (kw == "ARG") {
      auto words = lex(in.args, nullptr);
      if (words.empty())
        return at(in.line, kw, "needs a name");
      for (auto& w : words) {
        auto eq = w.find('=');
        auto name = w.substr(0, eq);
        if (name.empty() || !name_start(name[0]))
          return at(in.line, kw, "bad name \"" + name + "\"");
        declared.insert(name);
        auto given = build_args.find(name);
        if (given != build_args.end())
          args[name] = given->second;
        else if (eq != std::string::npos)
          args[name] = lex(w.substr(eq + 1), &args, false)[0];
        else
          args.erase(name);
      }
      continue;
    }
    if (auto r = recorded().find(kw); r != recorded().end()) {
      out.warnings.push_back("Dockerfile line " + std::to_string(in.line) + ": " + kw
                             + " is not kept: " + r->second);
      continue;
    }
    if (auto r = refused().find(kw); r != refused().end())
      return at(in.line, kw, r->second);
    if (kw == "RUN") {
      if (auto s = refuse_flags(in); !s)
        return s.err();
      if (in.args.empty())
        return at(in.line, kw, "needs a command");
      st.what = step::kind::run;
      st.argv = in.json_form ? in.json : std::vector<std::string>{"/bin/sh", "-c", in.args};
      if (st.argv.empty())
        return at(in.line, kw, "the exec form needs a command");
      st.env = args;
      for (auto& [k, v] : cfg.env)
        st.env[k] = v;
      st.text = "RUN " + (in.json_form ? nlohmann::json(in.json).dump() : in.args);
    } else if (kw == "COPY" || kw == "ADD") {
      if (auto s = refuse_flags(in); !s)
        return s.err();
      auto v = vars();
      std::vector<std::string> words;
      if (in.json_form)
        for (auto& w : in.json)
          words.push_back(substitute(w, v));
      else
        words = lex(in.args, &v);
      if (words.size() < 2)
        return at(in.line, kw, "needs a source and a destination");
      st.what = step::kind::copy;
      st.add = kw == "ADD";
      st.dest = words.back();
      words.pop_back();
      for (auto& src : words) {
        if (st.add && (src.find("://") != std::string::npos || src.rfind("git@", 0) == 0))
          return at(in.line, kw, "\"" + src + "\": ADD of a URL is not supported (fetch it in a"
                                 " RUN with --network, or put it in the context)");
        if (src.find_first_of("*?[") != std::string::npos)
          return at(in.line, kw, "\"" + src + "\": wildcards in sources are not supported");
      }
      if (words.size() > 1 && st.dest.back() != '/')
        return at(in.line, kw, "with several sources the destination must end with /");
      bool dir = st.dest.back() == '/' || st.dest == "." || st.dest == "..";
      st.dest = join_path(cfg.workdir, st.dest);
      // "/w/./" and "/w/." name /w/ (lexically, as Docker does).
      for (size_t at; (at = st.dest.find("/./")) != std::string::npos;)
        st.dest.erase(at, 2);
      if (st.dest.size() >= 2 && st.dest.compare(st.dest.size() - 2, 2, "/.") == 0)
        st.dest.pop_back();
      if (dir && st.dest.back() != '/')
        st.dest += '/';
      st.sources = words;
      std::string shown;
      for (auto& w : words)
        shown += w + " ";
      st.text = kw + " " + shown + st.dest;
    } else if (kw == "ENV") {
      auto v = vars();
      auto words = lex(in.args, nullptr);
      if (words.empty())
        return at(in.line, kw, "needs a name and a value");
      std::map<std::string, std::string> set;
      if (words[0].find('=') == std::string::npos) { // ENV k v (the rest of the line)
        auto sp = in.args.find_first_of(" \t");
        if (sp == std::string::npos)
          return at(in.line, kw, "\"" + in.args + "\" has no value");
        set[words[0]] = lex(trim(std::string_view(in.args).substr(sp)), &v, false)[0];
      } else {
        for (auto& w : lex(in.args, &v)) {
          auto eq = w.find('=');
          if (eq == std::string::npos || eq == 0)
            return at(in.line, kw, "\"" + w + "\" is not NAME=VALUE");
          set[w.substr(0, eq)] = w.substr(eq + 1);
        }
      }
      for (auto& [k, val] : set)
        cfg.env[k] = val;
      st.text = "ENV";
      for (auto& [k, val] : set)
        st.text += " " + k + "=" + nlohmann::json(val).dump();
    } else if (kw == "WORKDIR") {
      auto v = vars();
      auto dir = lex(in.args, &v, false)[0];
      if (trim(dir).empty())
        return at(in.line, kw, "needs a directory");
      cfg.workdir = join_path(cfg.workdir, trim(dir));
      while (cfg.workdir.size() > 1 && cfg.workdir.back() == '/')
        cfg.workdir.pop_back();
      st.text = "WORKDIR " + cfg.workdir;
    } else if (kw == "USER") {
      auto v = vars();
      auto user = trim(lex(in.args, &v, false)[0]);
      if (auto s = validate_user(user, "USER"); !s)
        return at(in.line, kw, s.err().message);
      cfg.user = user;
      st.text = "USER " + user;
    } else {
      return at(in.line, kw, "unknown instruction");
    }
    if (auto s = validate_layer_config(cfg); !s)
      return at(in.line, kw, s.err().message);
    st.config = cfg;
    out.steps.push_back(std::move(st));
  }
  if (!seen_from)
    return invalid_argument("Dockerfile: no FROM instruction");
  for (auto& [k, v] : build_args)
    if (!declared.count(k))
      out.warnings.push_back("build arg " + k + " was not consumed (no ARG " + k
                             + " in the Dockerfile)");
  out.config = cfg;
  return out;
}

} // namespace dsec::layers::dockerfile
