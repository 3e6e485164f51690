-- cohost.metrics: Prometheus counters, gauges and histograms for the
-- application, shown on --status-addr's /metrics. Every worker thread and
-- worker process adds into the same series (shared memory made before the
-- workers start, host/stats/metrics.c), so a series is the sum over all of
-- them, and a reload keeps its values. docs/stats.md.
--
--   local jobs = cohost.metrics.counter("app_jobs_total", "Jobs run.", { "kind" })
--   jobs:inc(1, { "email" })
--   local lat = cohost.metrics.histogram("app_job_seconds", "Job time.", { "kind" })
--   lat:observe(0.12, { "email" })
local M = {}

local core = require "cohost.core.metrics"
local concat = table.concat

local Metric = {}
Metric.__index = Metric

-- The series of this metric for label values (a list, one per label
-- name), cached on this worker by their values.
local NONE = {}
function Metric:_series(values)
  values = values or NONE
  local key = #values == 0 and "" or concat(values, "\31")
  local s = self.cache[key]
  if not s then
    s = core.series(self.id, values)
    self.cache[key] = s
  end
  return s
end

-- counter:inc([v [, labels]]), gauge:inc: adds v (default 1).
function Metric:inc(v, labels)
  core.add(self:_series(labels), v or 1)
end

-- gauge:dec([v [, labels]]): subtracts v (default 1).
function Metric:dec(v, labels)
  core.add(self:_series(labels), -(v or 1))
end

-- gauge:set(v [, labels]): the last set wins, whichever worker made it.
function Metric:set(v, labels)
  core.set(self:_series(labels), v)
end

-- histogram:observe(v [, labels]).
function Metric:observe(v, labels)
  core.observe(self:_series(labels), v)
end

local function new(kind, name, help, label_names, buckets)
  local id = core.register(name, help, kind, label_names or NONE, buckets)
  return setmetatable({ id = id, kind = kind, cache = {} }, Metric)
end

-- counter(name, help [, label_names]) -> metric with :inc.
function M.counter(name, help, label_names)
  return new("counter", name, help, label_names)
end

-- gauge(name, help [, label_names]) -> metric with :set, :inc, :dec.
function M.gauge(name, help, label_names)
  return new("gauge", name, help, label_names)
end

-- histogram(name, help [, label_names [, buckets]]) -> metric with
-- :observe; buckets default to Prometheus' (0.005 .. 10 seconds).
function M.histogram(name, help, label_names, buckets)
  return new("histogram", name, help, label_names, buckets)
end

-- The registry (cohost.http's metrics and the application's) in the
-- Prometheus text format, as /metrics shows it.
M.render = core.render

return M
