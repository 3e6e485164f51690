-- cohost.postgres (docs/postgres.md): quoting without a server, then the
-- pool, transactions, timeouts and 20 concurrent pg_sleep(0.5) against a
-- real PostgreSQL started by this file (h.postgres).
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
  local server, db

  setup(function()
    server = h.postgres()
    db = pg.pool { user = "postgres", host = "127.0.0.1", port = server.port, size = 20 }
  end)
  teardown(function()
    if db then db:close() end
    if server then server.stop() end
  end)

  it("round-trips hostile strings through quoting", function()
    local values = { "it's", "\\", "\\'", "'; DROP TABLE x; --", "E'", "$1", "tab\there", "ünï©ødé", "" }
    for _, v in ipairs(values) do
      local rows = assert(db:query("SELECT $1::text AS v, $2::int AS n, $3 IS NULL AS z", v, 5, nil))
      assert.equal(v, rows[1].v)
      assert.equal("5", rows[1].n)
      assert.equal("t", rows[1].z)
    end
  end)

  it("returns rows, counts and errors", function()
    assert(db:query("CREATE TABLE items (id serial PRIMARY KEY, name text UNIQUE)"))
    assert.equal(2, db:query("INSERT INTO items (name) VALUES ($1), ($2)", "a", "b"))
    local rows = assert(db:query("SELECT name FROM items ORDER BY name"))
    assert.same({ { name = "a" }, { name = "b" } }, rows)
    local res, err = db:query("INSERT INTO items (name) VALUES ($1)", "a")
    assert.is_nil(res)
    assert.matches("duplicate key", err)
    -- The connection that failed is still usable afterwards.
    assert.equal(1, db:query("INSERT INTO items (name) VALUES ($1)", "c"))
  end)

  it("commits a transaction, and rolls back on an error or a nil result", function()
    assert(db:query("CREATE TABLE accounts (name text PRIMARY KEY, balance int CHECK (balance >= 0))"))
    assert(db:query("INSERT INTO accounts VALUES ('ann', 10), ('bob', 0)"))
    local function move(n)
      return db:transaction(function(conn)
        assert(conn:query("UPDATE accounts SET balance = balance + $1 WHERE name = 'bob'", n))
        local ok, err = conn:query("UPDATE accounts SET balance = balance - $1 WHERE name = 'ann'", n)
        if not ok then return nil, err end
        return "moved"
      end)
    end
    assert.equal("moved", move(4))
    local ok, err = move(100)   -- the CHECK fails: all of it rolls back
    assert.is_nil(ok)
    assert.matches("violates check constraint", err)
    local rows = db:query("SELECT name, balance FROM accounts ORDER BY name")
    assert.same({ { name = "ann", balance = "6" }, { name = "bob", balance = "4" } }, rows)
    ok, err = db:transaction(function(conn)
      conn:query("UPDATE accounts SET balance = 0")
      error("changed my mind")
    end)
    assert.is_nil(ok)
    assert.matches("changed my mind", err)
    assert.equal("6", db:query("SELECT balance FROM accounts WHERE name = 'ann'")[1].balance)
  end)

  it("statement_timeout makes the server cancel a long query", function()
    local quick = pg.pool { user = "postgres", host = "127.0.0.1", port = server.port, statement_timeout = 0.2 }
    defer(function() quick:close() end)
    local res, err = quick:query("SELECT pg_sleep(5)")
    assert.is_nil(res)
    assert.matches("statement timeout", err)
    assert.equal("1", quick:query("SELECT 1 AS one")[1].one)
  end)

  it("a full pool makes acquire wait, then time out", function()
    local small = pg.pool { user = "postgres", host = "127.0.0.1", port = server.port, size = 1, wait_timeout = 0.2 }
    defer(function() small:close() end)
    local conn = assert(small:acquire())
    local res, err = small:query("SELECT 1")
    assert.is_nil(res)
    assert.equal("timeout", err)
    small:release(conn)
    assert.equal("1", small:query("SELECT 1 AS one")[1].one)
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
    -- One after another they would take 10 s; parked in libpq's reads
    -- they overlap.
    assert.is_true(took < 5, ("20 x pg_sleep(0.5) took %.2f s"):format(took))
  end)
end)
