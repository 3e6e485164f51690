-- wrk script for scripts/bench/http_profile.sh: wrk exits after
-- HTTP_COUNT responses (environment, default 10000), so a run serves a
-- fixed number of requests however slow the server (e.g. under valgrind).
-- Use with -t1: each thread counts for itself. It prints one line,
--   requests=10000 non200=0
-- and exits at once: wrk.thread:stop() would leave wrk waiting out -d.
local limit = tonumber(os.getenv("HTTP_COUNT")) or 10000
local seen, bad = 0, 0

function response(status)
  seen = seen + 1
  if status ~= 200 then
    bad = bad + 1
  end
  if seen >= limit then
    io.write(string.format("requests=%d non200=%d\n", seen, bad))
    io.flush()
    os.exit(0)
  end
end
