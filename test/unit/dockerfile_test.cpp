// The Dockerfile subset (layers/dockerfile.hpp): parsing, substitution,
// planning, and the clear refusals.
#include <catch2/catch.hpp>

#include "layers/dockerfile.hpp"

using namespace dsec;
namespace df = dsec::layers::dockerfile;

namespace {

df::plan plan_of(const std::string& text, std::map<std::string, std::string> args = {},
                 layer_config base = {}) {
  auto ins = df::parse(text);
  REQUIRE(ins);
  auto p = df::make_plan(*ins, args, base);
  if (!p)
    FAIL(p.err().message);
  return *p;
}

std::string refusal(const std::string& text, std::map<std::string, std::string> args = {}) {
  auto ins = df::parse(text);
  if (!ins)
    return ins.err().message;
  auto p = df::make_plan(*ins, args, {});
  REQUIRE_FALSE(p);
  CHECK(p.err().code == errc::invalid_argument);
  return p.err().message;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("instructions: comments, continuations, keywords in any case, the JSON form") {
  auto ins = df::parse("# syntax=docker/dockerfile:1\n"
                       "from base/busybox@1\n"
                       "\n"
                       "RUN echo a \\\n"
                       "  # a comment inside\n"
                       "    && echo b\n"
                       "run [\"/bin/echo\", \"x y\"]\n"
                       "RUN [not json\n");
  REQUIRE(ins);
  REQUIRE(ins->size() == 4);
  CHECK((*ins)[0].keyword == "FROM");
  CHECK((*ins)[1].line == 4);
  CHECK((*ins)[1].args == "echo a  && echo b");
  CHECK((*ins)[2].json_form);
  CHECK((*ins)[2].json == std::vector<std::string>{"/bin/echo", "x y"});
  CHECK_FALSE((*ins)[3].json_form);
  CHECK(has(df::parse("# escape=`\nFROM x@1\n").err().message, "escape"));
}

TEST_CASE("substitution: $var, ${var}, defaults, escapes") {
  std::map<std::string, std::string> v{{"A", "1"}, {"EMPTY", ""}};
  CHECK(df::substitute("$A-${A}-${B:-two}-${A:+set}-${EMPTY:-d}-\\$A-$", v) == "1-1-two-set-d-$A-$");
  CHECK(df::substitute("${UNSET}x", v) == "x");
}

TEST_CASE("a plan: ARG, ENV both forms, WORKDIR, USER, COPY, RUN with their state") {
  auto p = plan_of("ARG BASE=base/busybox@1\n"
                   "FROM $BASE\n"
                   "ARG GREETING=hello\n"
                   "ARG WHO\n"
                   "ENV APP_HOME /srv/app\n"
                   "ENV MSG=\"$GREETING world\" LEVEL=${WHO:-none} RAW='$x'\n"
                   "WORKDIR $APP_HOME\n"
                   "WORKDIR sub\n"
                   "COPY a.txt dir/ ./\n"
                   "COPY [\"b c.txt\", \"/etc/b.txt\"]\n"
                   "USER ${WHO:-nobody}\n"
                   "RUN echo \"$MSG\" > out.txt\n"
                   "RUN [\"/bin/true\"]\n",
                   {{"WHO", "app"}}, layer_config{{{"PATH", "/bin"}}, "", ""});
  CHECK(p.from == "base/busybox@1");
  REQUIRE(p.steps.size() == 9);
  CHECK(p.config.env == std::map<std::string, std::string>{{"PATH", "/bin"},
                                                           {"APP_HOME", "/srv/app"},
                                                           {"MSG", "hello world"},
                                                           {"LEVEL", "app"},
                                                           {"RAW", "$x"}});
  CHECK(p.config.workdir == "/srv/app/sub");
  CHECK(p.config.user == "app");
  auto& copy = p.steps[4];
  CHECK(copy.what == df::step::kind::copy);
  CHECK(copy.sources == std::vector<std::string>{"a.txt", "dir/"});
  CHECK(copy.dest == "/srv/app/sub/");
  CHECK(p.steps[5].dest == "/etc/b.txt");
  CHECK(p.steps[5].sources == std::vector<std::string>{"b c.txt"});
  auto& run = p.steps[7];
  CHECK(run.what == df::step::kind::run);
  CHECK(run.argv == std::vector<std::string>{"/bin/sh", "-c", "echo \"$MSG\" > out.txt"});
  CHECK(run.env.at("GREETING") == "hello"); // ARGs reach RUN's environment ...
  CHECK(run.env.at("MSG") == "hello world");
  CHECK(run.config.user == "app");
  CHECK(run.config.workdir == "/srv/app/sub");
  CHECK(p.config.env.count("GREETING") == 0); // ... but not the layer's defaults
  CHECK(p.steps[8].argv == std::vector<std::string>{"/bin/true"});
  CHECK(p.warnings.empty());
}

TEST_CASE("instructions a layer has no place for are kept as warnings; unknown build args warn") {
  auto p = plan_of("FROM x@1\nCMD [\"sh\"]\nEXPOSE 80\nLABEL a=b\nENTRYPOINT x\n", {{"NOPE", "1"}});
  REQUIRE(p.warnings.size() == 5);
  CHECK(has(p.warnings[0], "line 2: CMD is not kept"));
  CHECK(has(p.warnings[1], "EXPOSE"));
  CHECK(has(p.warnings[4], "build arg NOPE was not consumed"));
  CHECK(p.steps.empty());
}

TEST_CASE("what is not supported is refused, naming the instruction and line") {
  CHECK(has(refusal("FROM a@1 AS build\n"), "line 1: FROM: \"AS build\": multi-stage"));
  CHECK(has(refusal("FROM a@1\nFROM b@1\n"), "line 2: FROM: a second FROM"));
  CHECK(has(refusal("RUN x\n"), "first instruction must be FROM"));
  CHECK(has(refusal("# only a comment\n"), "no FROM"));
  CHECK(has(refusal("FROM a@1\nCOPY --chown=1:1 a /b\n"), "line 2: COPY: option --chown is not supported"));
  CHECK(has(refusal("FROM a@1\nCOPY --from=build /a /b\n"), "option --from"));
  CHECK(has(refusal("FROM a@1\nRUN --mount=type=cache,target=/x true\n"), "option --mount"));
  CHECK(has(refusal("FROM a@1\nADD https://x.test/a.tgz /\n"), "ADD of a URL"));
  CHECK(has(refusal("FROM a@1\nCOPY *.txt /\n"), "wildcards"));
  CHECK(has(refusal("FROM a@1\nCOPY a b c\n"), "must end with /"));
  CHECK(has(refusal("FROM a@1\nSHELL [\"/bin/bash\", \"-c\"]\n"), "line 2: SHELL"));
  CHECK(has(refusal("FROM a@1\nVOLUME /data\n"), "line 2: VOLUME"));
  CHECK(has(refusal("FROM a@1\nONBUILD RUN x\n"), "ONBUILD"));
  CHECK(has(refusal("FROM a@1\nFROBNICATE x\n"), "line 2: FROBNICATE: unknown instruction"));
  CHECK(has(refusal("FROM a@1\nUSER bad user\n"), "line 2: USER"));
  CHECK(has(refusal("FROM a@1\nENV novalue\n"), "has no value"));
  CHECK(has(refusal("FROM a@1\nRUN\n"), "needs a command"));
}
