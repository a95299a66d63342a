#include "server/observe/trace.h"

#include <gtest/gtest.h>

#include "httplib.h"
#include "proto/base/sync.h"

namespace kiln::server {
namespace {

TEST(TraceParentTest, ParsesValidHeaders) {
  auto p = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(p->span_id, "00f067aa0ba902b7");
  EXPECT_TRUE(p->sampled);
}

TEST(TraceParentTest, RejectsMalformedHeaders) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       }) {
    EXPECT_FALSE(ParseTraceParent(bad).has_value()) << bad;
  }
}

TEST(TraceTest, JoinsTheTrainersTraceAndNestsSpans) {
  auto parent = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  auto trace = std::make_shared<Trace>("kiln.v1.Compiler/Compile", parent);
  EXPECT_EQ(trace->trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
  {
    ScopedSpan lookup(trace.get(), "lookup");
    ScopedSpan inner(trace.get(), "guards", lookup.id());
    trace->SetAttribute(inner.id(), "outcome", "hit");
  }
  trace->Add("codegen", absl::FromUnixSeconds(10), absl::FromUnixSeconds(11));
  trace->Finish();
  std::vector<SpanRecord> spans = trace->spans();
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0].parent_span_id, "00f067aa0ba902b7");
  EXPECT_EQ(spans[1].parent_span_id, trace->root_span_id());
  EXPECT_EQ(spans[2].parent_span_id, spans[1].span_id);
  EXPECT_EQ(spans[2].attributes.at("outcome"), "hit");
  for (const SpanRecord& s : spans) EXPECT_GE(s.end, s.start) << s.name;

  TraceStore store(2);
  store.Record(trace);
  nlohmann::json chrome = store.ChromeTraceJson();
  ASSERT_EQ(chrome["traceEvents"].size(), 5u);  // a row name plus four spans
  EXPECT_EQ(chrome["traceEvents"][1]["ph"], "X");
  EXPECT_EQ(chrome["traceEvents"][4]["dur"], 1000000);
}

TEST(TraceStoreTest, KeepsOnlyRecentTraces) {
  TraceStore store(3);
  for (int i = 0; i < 5; ++i) {
    auto t = std::make_shared<Trace>("t" + std::to_string(i), std::nullopt);
    t->Finish();
    store.Record(t);
  }
  nlohmann::json chrome = store.ChromeTraceJson();
  ASSERT_EQ(chrome["traceEvents"].size(), 6u);
  EXPECT_EQ(chrome["traceEvents"][0]["args"]["name"].get<std::string>().substr(0, 2), "t2");
}

TEST(TraceStoreTest, ExportsOtlpJsonToACollector) {
  // A collector on loopback that keeps what it receives.
  httplib::Server collector;
  Mutex mu;
  std::vector<std::string> bodies;
  collector.Post("/v1/traces", [&](const httplib::Request& req, httplib::Response& res) {
    MutexLock lock(&mu);
    bodies.push_back(req.body);
    res.status = 200;
  });
  const int port = collector.bind_to_any_port("127.0.0.1");
  std::thread serve([&] { collector.listen_after_bind(); });
  {
    TraceStore store(8, "http://127.0.0.1:" + std::to_string(port) + "/v1/traces");
    auto t = std::make_shared<Trace>("kiln.v1.Cache/Get", std::nullopt);
    { ScopedSpan s(t.get(), "store"); }
    t->Finish();
    store.Record(t);
    for (int i = 0; i < 200 && store.exported() == 0; ++i) absl::SleepFor(absl::Milliseconds(25));
    EXPECT_EQ(store.exported(), 1);
    EXPECT_EQ(store.export_failures(), 0);
  }
  collector.stop();
  serve.join();
  MutexLock lock(&mu);
  ASSERT_EQ(bodies.size(), 1u);
  nlohmann::json otlp = nlohmann::json::parse(bodies[0]);
  const auto& spans = otlp["resourceSpans"][0]["scopeSpans"][0]["spans"];
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["name"], "kiln.v1.Cache/Get");
  EXPECT_EQ(spans[0]["kind"], 2);
  EXPECT_EQ(spans[1]["parentSpanId"], spans[0]["spanId"]);
  EXPECT_EQ(otlp["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"], "kilnd");
}

}  // namespace
}  // namespace kiln::server
