-- cohost.postgres (docs/postgres.md): quoting without a server, then,
-- against one real PostgreSQL 15 this file starts (h.postgres) and
-- restarts twice: bound parameters, typed rows, prepared statements,
-- SQLSTATE errors, transactions, the pool, pipelines, COPY, LISTEN/NOTIFY
-- (across two workers and a restart), statement timeouts and cancelled
-- tasks, and a restart under load.
local cohost = require "cohost"
local http = require "cohost.http"
local pg = require "cohost.postgres"
local h = require "spec.helper"
local defer = h.cleanups(after_each)

describe("cohost.postgres quoting", function()
  it("quotes values as SQL literals", function()
    assert.equal("NULL", pg.quote(nil))
    assert.equal("NULL", pg.quote(require("cjson").null))
    assert.equal("TRUE", pg.quote(true))
    assert.equal("FALSE", pg.quote(false))
    assert.equal("42", pg.quote(42))
    assert.equal("-7", pg.quote(-7))
    assert.equal("0.5", pg.quote(0.5))
    assert.equal("E'plain'", pg.quote("plain"))
    assert.equal("E'it''s'", pg.quote("it's"))
    assert.equal("E'back\\\\slash'", pg.quote("back\\slash"))
    assert.equal("E'\\\\'' OR 1=1 --'", pg.quote("\\' OR 1=1 --"))
    assert.equal('"My ""Table"""', pg.quote_ident('My "Table"'))
  end)

  it("refuses what it cannot quote safely", function()
    assert.has_error(function() pg.quote("a\0b") end, "cannot quote a string with a NUL byte")
    assert.has_error(function() pg.quote(0 / 0) end, "cannot quote a non-finite number")
    assert.has_error(function() pg.quote(math.huge) end, "cannot quote a non-finite number")
    assert.has_error(function() pg.quote({}) end, "cannot quote a table")
  end)

  it("format replaces $n outside literals, identifiers and comments", function()
    assert.equal("SELECT E'a' , 2, E'a'", pg.format("SELECT $1 , $2, $1", "a", 2))
    assert.equal("SELECT '$1', \"$1\", E'x' -- $1\n", pg.format("SELECT '$1', \"$1\", $1 -- $1\n", "x"))
    assert.equal("SELECT 'it''s $1', E'y'", pg.format("SELECT 'it''s $1', $1", "y"))
    assert.equal("SELECT $1", pg.format("SELECT $1"))   -- no arguments: as written
    assert.has_error(function() pg.format("SELECT $2", "a") end, "$2: only 1 argument given")
  end)
end)

describe("cohost.postgres against PostgreSQL", function()
  local server, db, opts

  -- Options of a pool on the test server, with extra fields.
  local function with(extra)
    local o = { user = "postgres", host = "127.0.0.1", port = server.port }
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  -- Rows of pg_stat_activity for other sessions, seen from db.
  local function activity(where, ...)
    return assert(db:query("SELECT pid, state, query, application_name FROM pg_stat_activity " ..
                           "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND " .. where, ...))
  end

  setup(function()
    server = h.postgres()
    opts = with { size = 20 }
    db = pg.pool(opts)
  end)
  teardown(function()
    if db then db:close() end
    if server then server.stop() end
  end)

  it("binds parameters and reads rows typed by column", function()
    local rows, affected = assert(db:query([[
      SELECT $1::int2 AS i2, $2::int4 AS i4, $3::int8 AS i8, $4::int8 AS i8max, $5::int8 AS i8min,
             9007199254740992::int8 AS i8safe, $6::float4 AS f4, $7::float8 AS f8,
             'NaN'::float8 AS nan, '-Infinity'::float8 AS ninf, $8::bool AS yes, $9 AS no,
             '123456789012345678901234567890.125'::numeric AS num, $10::text AS t,
             $11::varchar AS vc, 'pg_class'::name AS nm, $12::uuid AS id,
             $13::text IS NULL AS nil_is_null, $14::int IS NULL AS null_is_null, NULL::text AS null_col,
             $15 AS untyped_number, $16 AS untyped_float]],
      7, -8, 2 ^ 53 - 1, 9223372036854775807LL, -9223372036854775807LL - 1, 1.5, 0.1, true, false,
      "text", "var", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", nil, pg.null, 42, 2.5))
    assert.equal(1, affected)
    local r = rows[1]
    assert.equal(7, r.i2)
    assert.equal(-8, r.i4)
    assert.equal(2 ^ 53 - 1, r.i8)
    assert.equal("number", type(r.i8safe))
    assert.equal(2 ^ 53, r.i8safe)
    assert.equal("cdata", type(r.i8max))
    assert.is_true(r.i8max == 9223372036854775807LL)
    assert.is_true(r.i8min == -9223372036854775807LL - 1)
    assert.equal(1.5, r.f4)
    assert.equal(0.1, r.f8)
    assert.is_true(r.nan ~= r.nan)
    assert.equal(-math.huge, r.ninf)
    assert.is_true(r.yes)
    assert.is_false(r.no)
    assert.equal("123456789012345678901234567890.125", r.num)
    assert.equal("text", r.t)
    assert.equal("var", r.vc)
    assert.equal("pg_class", r.nm)
    assert.equal("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", r.id)
    assert.is_true(r.nil_is_null)
    assert.is_true(r.null_is_null)
    assert.equal(pg.null, r.null_col)
    assert.equal(42, r.untyped_number)   -- an integral number binds as int8
    assert.equal(2.5, r.untyped_float)   -- any other as float8
    assert.same({ "i2", "i4", "i8", "i8max", "i8min", "i8safe", "f4", "f8", "nan", "ninf", "yes", "no",
                  "num", "t", "vc", "nm", "id", "nil_is_null", "null_is_null", "null_col",
                  "untyped_number", "untyped_float" },
                { unpack(rows.columns) })
  end)

  it("reads bytea, json, timestamps and arrays", function()
    local blob = "a\0b\255\0" .. string.rep("\1", 3)
    local rows = assert(db:query([=[
      SELECT $1::bytea AS b, '{"a":[1,2],"e":[],"o":{},"n":null,"s":"\u00e9\n\"q\""}'::jsonb AS jb,
             '[1, {"x": [true]}]'::json AS j, $2::jsonb AS param_json,
             '2024-02-29'::date AS d, '2024-02-29 13:14:15.5'::timestamp AS ts,
             '2024-02-29 13:14:15+00'::timestamptz AS tz,
             ARRAY[1, 2, NULL]::int4[] AS ints, ARRAY['a,b', 'c"d', 'e\f', NULL, 'NULL', '']::text[] AS texts,
             '{}'::int[] AS empty, ARRAY[true, false] AS bools, ARRAY[9223372036854775807]::int8[] AS bigs,
             ARRAY['\x00ff'::bytea] AS blobs, ARRAY[[1, 2], [3, 4]] AS matrix,
             ARRAY['2024-01-02 03:04:05'::timestamp] AS stamps, '[0:1]={7,8}'::int[] AS bounded]=],
      pg.bytea(blob), pg.json { list = http.array {}, n = 1 }))
    local r = rows[1]
    assert.equal(blob, r.b)
    assert.same({ 1, 2 }, { unpack(r.jb.a) })
    assert.equal(http.array_mt, getmetatable(r.jb.e))   -- [] stays an array
    assert.is_nil(getmetatable(r.jb.o))                 -- {} an object
    assert.equal(pg.null, r.jb.n)
    assert.equal("\u{e9}\n\"q\"", r.jb.s)
    assert.equal(1, r.j[1])
    assert.is_true(r.j[2].x[1])
    assert.equal(1, r.param_json.n)
    assert.equal(http.array_mt, getmetatable(r.param_json.list))
    assert.equal("2024-02-29", r.d)
    assert.equal("2024-02-29T13:14:15.5", r.ts)
    assert.matches("^2024%-02%-29T%d%d:%d%d:15[+-]%d%d", r.tz)
    assert.equal(3, #r.ints)   -- pg.null is a value: it counts
    assert.same({ 1, 2, pg.null }, { r.ints[1], r.ints[2], r.ints[3] })
    assert.same({ "a,b", 'c"d', "e\\f", pg.null, "NULL", "" },
                { r.texts[1], r.texts[2], r.texts[3], r.texts[4], r.texts[5], r.texts[6] })
    assert.equal(0, #r.empty)
    assert.equal(http.array_mt, getmetatable(r.empty))
    assert.same({ true, false }, { r.bools[1], r.bools[2] })
    assert.is_true(r.bigs[1] == 9223372036854775807LL)
    assert.equal("\0\255", r.blobs[1])
    assert.same({ { 3, 4 } }, { { r.matrix[2][1], r.matrix[2][2] } })
    assert.equal("2024-01-02T03:04:05", r.stamps[1])
    assert.same({ 7, 8 }, { r.bounded[1], r.bounded[2] })
    -- res:json's encoding: int8 past 2^53 as its digits, empty arrays [].
    local json = assert(http.json_encode { big = r.bigs[1], empty = r.empty, none = assert(db:query("SELECT 1 WHERE false")) })
    assert.matches('"big":9223372036854775807', json, 1, true)
    assert.matches('"empty":[]', json, 1, true)
    assert.matches('"none":[]', json, 1, true)
  end)

  it("round-trips hostile strings and bytea with NUL bytes as data, never as SQL", function()
    local values = { "it's", "\\", "\\'", "'; DROP TABLE x; --", "E'", "$1", "$2", "tab\there", "ünï©ødé", "",
                     "\"quoted\"", string.rep("x", 100000) }
    for _, v in ipairs(values) do
      local rows = assert(db:query("SELECT $1::text AS v, $2::bytea AS b, length($1) AS n", v, pg.bytea(v .. "\0" .. v)))
      assert.equal(v, rows[1].v)
      assert.equal(v .. "\0" .. v, rows[1].b)
    end
    local ok, err = pcall(db.query, db, "SELECT $1::text", "a\0b")
    assert.is_false(ok)
    assert.matches("NUL byte", err)
  end)

  it("binds $1 in the extended protocol: the server sees the placeholder, not the value", function()
    local t = cohost.spawn(function() return db:query("SELECT pg_sleep($1)", 20) end)
    local seen = h.eventually(function()
      local rows = activity("state = 'active' AND query LIKE 'SELECT pg_sleep%'")
      return rows[1] and rows[1].query
    end)
    assert.equal("SELECT pg_sleep($1)", seen)
    -- Killing the task sends a cancel request: the server stops the query.
    cohost.kill(t)
    assert.is_true(h.wait_for(function()
      return #activity("state = 'active' AND query LIKE 'SELECT pg_sleep%'") == 0
    end))
    assert.equal(0, db:stats().busy)
  end)

  it("prepares a statement once per connection, in a bounded cache", function()
    -- A host name is resolved by cohost.dns and handed to libpq as hostaddr.
    local conn = assert(pg.connect(with { host = "localhost", statement_cache = 2 }))
    defer(function() conn:close() end)
    for _ = 1, 3 do assert(conn:query("SELECT 1 AS one")) end
    assert.equal(1, conn:statements())
    assert(conn:query("SELECT 2 AS two"))
    assert(conn:query("SELECT 1 AS one"))
    assert(conn:query("SELECT 3 AS three"))   -- "SELECT 2" was used least recently
    assert.equal(2, conn:statements())
    local rows = assert(conn:exec("SELECT statement FROM pg_prepared_statements ORDER BY statement"))
    assert.same({ "SELECT 1 AS one", "SELECT 3 AS three" }, { rows[1].statement, rows[2].statement })
    -- The same text with other parameter types is another statement.
    assert.equal(5, conn:query("SELECT $1::int8 AS v", 5)[1].v)
    assert.equal(6, conn:query("SELECT $1::int8 AS v", "6")[1].v)
    -- A statement the server forgot is prepared again.
    assert(conn:exec("DEALLOCATE ALL"))
    assert.equal(6, conn:query("SELECT $1::int8 AS v", "6")[1].v)
    assert(conn:exec("CREATE TABLE shape (a int)"))
    assert(conn:query("SELECT * FROM shape"))
    assert(conn:exec("ALTER TABLE shape ADD COLUMN b int"))
    assert.same({ "a", "b" }, { unpack(assert(conn:query("SELECT * FROM shape")).columns) })
  end)

  it("reports SQLSTATE and the server's fields for constraint violations", function()
    assert(db:exec([[
      CREATE TABLE parents (id int PRIMARY KEY);
      CREATE TABLE kids (id serial PRIMARY KEY, parent int REFERENCES parents (id),
                         name text UNIQUE, age int CHECK (age >= 0));
      INSERT INTO parents VALUES (1);]]))
    local rows, affected = assert(db:query("INSERT INTO kids (parent, name, age) VALUES ($1, $2, $3) RETURNING id, name",
                                           1, "ann", 3))
    assert.equal(1, affected)
    assert.equal("ann", rows[1].name)
    local _, err = db:query("INSERT INTO kids (parent, name, age) VALUES (1, $1, 1)", "ann")
    assert.equal("23505", err.code)
    assert.equal("kids_name_key", err.constraint)
    assert.equal("kids", err.table)
    assert.equal("ERROR", err.severity)
    assert.equal("Key (name)=(ann) already exists.", err.detail)
    assert.equal('ERROR: duplicate key value violates unique constraint "kids_name_key" (SQLSTATE 23505)', tostring(err))
    assert.is_nil(err.connection)
    _, err = db:query("INSERT INTO kids (parent, name, age) VALUES ($1, 'bob', 1)", 99)
    assert.equal("23503", err.code)
    assert.equal("kids_parent_fkey", err.constraint)
    _, err = db:query("INSERT INTO kids (parent, name, age) VALUES (1, 'cy', $1)", -1)
    assert.equal("23514", err.code)
    assert.equal("kids_age_check", err.constraint)
    _, err = db:query("SELEC 1")
    assert.equal("42601", err.code)
    -- Every connection that failed is usable afterwards.
    assert.equal(1, db:query("SELECT count(*) AS n FROM kids")[1].n)
  end)

  it("commits a transaction, and rolls back on an error, a nil result or a failed statement", function()
    assert(db:query("CREATE TABLE accounts (name text PRIMARY KEY, balance int CHECK (balance >= 0))"))
    assert(db:query("INSERT INTO accounts VALUES ('ann', 10), ('bob', 0)"))
    local function move(n)
      return db:transaction(function(tx)
        assert(tx:query("UPDATE accounts SET balance = balance + $1 WHERE name = 'bob'", n))
        local ok, err = tx:query("UPDATE accounts SET balance = balance - $1 WHERE name = 'ann'", n)
        if not ok then return nil, err end
        return "moved", n
      end, { isolation = "serializable" })
    end
    assert.same({ "moved", 4 }, { move(4) })
    local ok, err = move(100)   -- the CHECK fails: all of it rolls back
    assert.is_nil(ok)
    assert.equal("23514", err.code)
    local function balances()
      local rows = db:query("SELECT name, balance FROM accounts ORDER BY name")
      return { rows[1].balance, rows[2].balance }
    end
    assert.same({ 6, 4 }, balances())
    ok, err = db:transaction(function(tx)
      tx:query("UPDATE accounts SET balance = 0")
      error("changed my mind")
    end)
    assert.is_nil(ok)
    assert.matches("changed my mind", err)
    ok, err = db:transaction(function(tx)
      tx:query("UPDATE accounts SET balance = 1")
      tx:query("UPDATE accounts SET balance = -1")   -- fails; fn goes on regardless
      return "done"
    end)
    assert.is_nil(ok)
    assert.equal("23514", err.code)
    assert.same({ 6, 4 }, balances())
    _, err = db:transaction(function(tx)
      local res, e = tx:query("UPDATE accounts SET balance = 5")
      if not res then return nil, e end
      return true
    end, { read_only = true })
    assert.equal("25006", err.code)   -- read-only transaction
    assert.equal(0, db:stats().busy)
  end)

  it("rolls back and gives the connection back when the task is killed inside a transaction", function()
    assert(db:query("CREATE TABLE killed (n int)"))
    local t = cohost.spawn(function()
      return db:transaction(function(tx)
        assert(tx:query("INSERT INTO killed VALUES (1)"))
        cohost.sleep(30)
      end)
    end)
    assert.is_true(h.wait_for(function()
      return #activity("state = 'idle in transaction' AND query LIKE 'INSERT INTO killed%'") == 1
    end))
    cohost.kill(t)
    assert.is_false((cohost.wait(t)))
    assert.is_true(h.wait_for(function() return #activity("state LIKE 'idle in transaction%'") == 0 end))
    assert.equal(0, db:query("SELECT count(*) AS n FROM killed")[1].n)
    assert.equal(0, db:stats().busy)
    -- with() gives its connection back when its function raises, too.
    local ok, err = db:with(function(conn)
      assert(conn:query("SELECT 1"))
      error({ reason = "mine" })
    end)
    assert.is_nil(ok)
    assert.equal("mine", err.reason)
    assert.equal(0, db:stats().busy)
  end)

  it("makes acquire wait for a full pool, then fail with a clear error after acquire_timeout", function()
    local small = pg.pool(with { size = 1, acquire_timeout = 0.2 })
    defer(function() small:close() end)
    local conn = assert(small:acquire())
    local t0 = cohost.monotonic()
    local res, err = small:query("SELECT 1")
    assert.is_nil(res)
    assert.is_true(cohost.monotonic() - t0 >= 0.15)
    assert.is_true(err.timeout)
    assert.equal("no free connection in 0.2 s: all 1 in use", tostring(err))
    -- A waiter gets the connection as soon as it comes back.
    local waiter = cohost.spawn(function() return small:query("SELECT 2 AS two") end)
    cohost.sleep(0.05)
    small:release(conn)
    local ok, rows = cohost.wait(waiter)
    assert.is_true(ok)
    assert.equal(2, rows[1].two)
    assert.equal(1, small:stats().timeouts)
  end)

  it("opens min connections at start and keeps them", function()
    local warm = pg.pool(with { min = 2, application_name = "cohost-warm" })
    defer(function() warm:close() end)
    assert.is_true(h.wait_for(function()
      return #activity("application_name = 'cohost-warm'") == 2
    end))
    assert.equal(2, warm:stats().idle)
  end)

  it("runs a pipeline in order, and reports an error inside it and the queries it skipped", function()
    local results = assert(db:pipeline(function(p)
      for i = 1, 50 do p:query("SELECT $1::int AS i, $2::text AS s", i, "v" .. i) end
    end))
    assert.equal(50, #results)
    for i = 1, 50 do
      assert.equal(i, results[i].rows[1].i)
      assert.equal("v" .. i, results[i].rows[1].s)
    end
    assert(db:query("CREATE TABLE piped (n int)"))
    results = assert(db:pipeline(function(p)
      p:query("INSERT INTO piped VALUES ($1)", 1)
      p:query("SELECT count(*) AS n FROM piped")
      p:query("SELECT 1 / $1 AS boom", 0)
      p:query("SELECT 2 AS two")
      p:query("SELEC oops")
    end))
    assert.equal(1, results[1].affected)
    assert.equal(1, results[2].rows[1].n)
    assert.equal("22012", results[3].err.code)   -- division by zero
    assert.is_true(results[4].err.skipped)
    assert.is_true(results[5].err.skipped)
    -- One implicit transaction up to the Sync: the error undid the insert.
    assert.equal(0, db:query("SELECT count(*) AS n FROM piped")[1].n)
    assert.equal(2, db:query("SELECT 2 AS two")[1].two)
  end)

  it("copies 100,000 rows in and out, streamed", function()
    assert(db:query("CREATE TABLE copied (id int, name text, data bytea)"))
    local n, batch, sent = 100000, 5000, 0
    local count = assert(db:copy_in("COPY copied FROM STDIN", function()
      if sent == n then return nil end
      local lines = {}
      for i = sent + 1, sent + batch do lines[#lines + 1] = ("%d\tname %d\t\\\\x00ff\n"):format(i, i) end
      sent = sent + batch
      return table.concat(lines)
    end))
    assert.equal(n, count)
    local r = db:query("SELECT count(*) AS n, sum(id) AS s, count(DISTINCT data) AS d FROM copied")[1]
    assert.same({ n, n * (n + 1) / 2, 1 }, { r.n, tonumber(r.s), r.d })
    local rows, bytes, pieces, last = 0, 0, 0, nil
    count = assert(db:copy_out("COPY (SELECT id, name FROM copied ORDER BY id) TO STDOUT", function(text)
      pieces = pieces + 1
      bytes = bytes + #text
      for line in text:gmatch("[^\n]+") do
        rows = rows + 1
        last = line
      end
    end))
    assert.equal(n, count)
    assert.equal(n, rows)
    assert.equal(n .. "\tname " .. n, last)
    assert.is_true(pieces > 1)   -- streamed in pieces, not one string
    -- A source that fails aborts the copy: nothing is kept.
    local res, err = db:copy_in("COPY copied FROM STDIN", function() return nil, "source broke" end)
    assert.is_nil(res)
    assert.equal("source broke", err)
    res, err = db:copy_in("COPY copied FROM STDIN", { "1\tx\t\\\\x00\n", "not a number\tx\t\\\\x00\n" })
    assert.is_nil(res)
    assert.equal("22P02", err.code)
    assert.equal(n, db:query("SELECT count(*) AS n FROM copied")[1].n)
  end)

  it("cancels a query past statement_timeout on the server and reuses the connection", function()
    local quick = pg.pool(with { size = 1, statement_timeout = 0.3, application_name = "cohost-quick" })
    defer(function() quick:close() end)
    local res, err = quick:query("SELECT pg_sleep(30)")
    assert.is_nil(res)
    assert.is_true(err.timeout)
    assert.equal("57014", err.code)
    assert.is_true(h.wait_for(function()
      return #activity("application_name = 'cohost-quick' AND state = 'active'") == 0
    end))
    assert.equal(1, quick:query("SELECT 1 AS one")[1].one)
    assert.equal(1, quick:stats().count)   -- the same connection
  end)

  it("delivers NOTIFY to subscribers, and again after a server restart", function()
    local sub = assert(db:listen("news"))
    local other = assert(db:listen("news"))
    assert(db:query("SELECT pg_notify($1, $2)", "news", "first"))
    assert(db:query("NOTIFY news, 'second'"))
    assert.equal("first", sub:next(5))
    assert.equal("second", sub:next(5))
    assert.equal("first", other:next(5))
    other:close()
    assert.same({ nil, "closed" }, { other:next(1) })
    assert.same({ nil, "timeout" }, { sub:next(0.05) })
    server.restart()
    -- The listener reconnects and listens again by itself; until it has,
    -- a notification finds nobody listening and is lost.
    local got = h.eventually(function()
      db:query("SELECT pg_notify('news', 'after')")
      return sub:next(0.1)
    end, 20)
    assert.equal("after", got)
    assert.equal(1, sub.gaps)
    assert.equal(1, db:stats().listen.reconnects)
    sub:close()
  end)

  it("fails the queries in flight at a server restart, and serves the next ones untouched", function()
    local stop, failures, after = false, {}, 0
    local threads = {}
    for i = 1, 8 do
      threads[i] = cohost.spawn(function()
        while not stop do
          local rows, err = db:query("SELECT $1::int AS i, pg_sleep(0.01)", i)
          if rows then
            after = after + 1
          else
            failures[#failures + 1] = err
            cohost.sleep(0.01)
          end
        end
      end)
    end
    assert.is_true(h.wait_for(function() return after > 20 end))
    server.restart()
    after = 0
    local failed = #failures
    assert.is_true(h.wait_for(function() return after > 50 end, 20))
    stop = true
    for i = 1, 8 do assert.is_true((cohost.wait(threads[i]))) end
    assert.is_true(failed > 0)
    for _, err in ipairs(failures) do
      assert.is_true(err.connection, tostring(err))
    end
    assert.is_true(db:stats().count <= 20)
  end)

  it("delivers a NOTIFY to the listeners of two workers", function()
    local out = h.tmpfile("")
    local script = h.tmpfile(h.server_script(([[
local pg = require "cohost.postgres"
local db = pg.pool { user = "postgres", host = "127.0.0.1", port = %d, size = 2 }
local sub = assert(db:listen("workers"))
local id = cohost.worker_id()
local function note(line)
  local f = io.open(%q, "a")
  f:write(line .. "\n")
  f:close()
end
cohost.spawn(function()
  while true do
    local payload = sub:next()
    if payload then note(id .. " " .. payload) end
  end
end)
note("ready " .. id)
listener = assert(cohost.listen("127.0.0.1:0", function() end))
]]):format(server.port, out)))
    local p = h.start("-w 2 " .. h.shell_quote(script))
    defer(p.stop)
    assert.is_true(h.wait_for(function()
      local s = h.slurp(out)
      return s:find("ready 0", 1, true) and s:find("ready 1", 1, true)
    end, 20))
    assert(db:query("NOTIFY workers, 'hello'"))
    assert.is_true(h.wait_for(function()
      local s = h.slurp(out)
      return s:find("0 hello", 1, true) and s:find("1 hello", 1, true)
    end))
  end)

  it("runs 20 handlers of SELECT pg_sleep(0.5) at once on one worker", function()
    local port = h.http_serve(function(req, res)
      local rows = assert(db:query("SELECT pg_sleep(0.5), $1::text AS d", req.query.i))
      res:send(rows[1].d)
    end)
    local bodies, took = h.run_all(20, function(i)
      local r = assert(http.request(("http://127.0.0.1:%d/?i=%d"):format(port, i), { timeout = 20000 }))
      return r.body
    end)
    for i = 1, 20 do assert.equal(tostring(i), bodies[i]) end
    -- One after another they would take 10 s; parked on their sockets
    -- they overlap.
    assert.is_true(took < 5, ("20 x pg_sleep(0.5) took %.2f s"):format(took))
  end)
end)
