-- cohost.core.crypto: digests, HMAC, base64 and random bytes against
-- published vectors (RFC 1321, FIPS 180, RFC 2202, RFC 4648, RFC 6455) and
-- coreutils' base64 as a second implementation.
local crypto = require "cohost.core.crypto"
local h = require "spec.helper"
h.cleanups(after_each)

local hex = h.hex

local MILLION_A = ("a"):rep(1000000)

describe("digests", function()
  it("md5 gives the RFC 1321 hex digests and md5_bin the same bytes", function()
    assert.equal("d41d8cd98f00b204e9800998ecf8427e", crypto.md5(""))
    assert.equal("900150983cd24fb0d6963f7d28e17f72", crypto.md5("abc"))
    assert.equal("57edf4a22be3c955ac49da2e2107b67a",
      crypto.md5("12345678901234567890123456789012345678901234567890123456789012345678901234567890"))
    assert.equal(16, #crypto.md5_bin("abc"))
    assert.equal("900150983cd24fb0d6963f7d28e17f72", hex(crypto.md5_bin("abc")))
  end)

  it("sha1_bin gives the FIPS 180 digests, a million a's included", function()
    assert.equal("da39a3ee5e6b4b0d3255bfef95601890afd80709", hex(crypto.sha1_bin("")))
    assert.equal("a9993e364706816aba3e25717850c26c9cd0d89d", hex(crypto.sha1_bin("abc")))
    assert.equal("34aa973cd4c4daa4f61eeb2bdbad27316534016f", hex(crypto.sha1_bin(MILLION_A)))
  end)

  it("sha256_bin gives the FIPS 180 digests", function()
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      hex(crypto.sha256_bin("")))
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      hex(crypto.sha256_bin("abc")))
    assert.equal("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
      hex(crypto.sha256_bin(MILLION_A)))
  end)

  it("digests strings with NUL bytes in them", function()
    assert.equal("93b885adfe0da089cdf634904fd59f71", crypto.md5("\0"))
    assert.are_not.equal(crypto.sha1_bin("a\0b"), crypto.sha1_bin("a\0c"))
  end)

  it("hmac_sha1 gives the RFC 2202 digests", function()
    assert.equal("b617318655057264e28bc0b6fb378c8ef146be00",
      hex(crypto.hmac_sha1(("\11"):rep(20), "Hi There")))
    assert.equal("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
      hex(crypto.hmac_sha1("Jefe", "what do ya want for nothing?")))
    -- A key longer than the block size is hashed first (test case 6).
    assert.equal("aa4ae5e15272d00e95705637ce8a3b55ed402112",
      hex(crypto.hmac_sha1(("\170"):rep(80), "Test Using Larger Than Block-Size Key - Hash Key First")))
  end)

  it("computes the RFC 6455 section 1.3 accept key", function()
    local key = "dGhlIHNhbXBsZSBub25jZQ=="
    assert.equal("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
      crypto.encode_base64(crypto.sha1_bin(key .. "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")))
  end)

  it("raises on a missing argument", function()
    assert.has_error(function() crypto.md5() end)
    assert.has_error(function() crypto.hmac_sha1("k") end)
  end)
end)

describe("base64", function()
  local vectors = {
    { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
    { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" },
  }

  it("encode_base64 gives the RFC 4648 vectors, with and without padding", function()
    for _, v in ipairs(vectors) do
      assert.equal(v[2], crypto.encode_base64(v[1]))
      assert.equal((v[2]:gsub("=", "")), crypto.encode_base64(v[1], true))
    end
  end)

  it("decode_base64 reverses the RFC 4648 vectors, padded or not", function()
    for _, v in ipairs(vectors) do
      assert.equal(v[1], crypto.decode_base64(v[2]))
      assert.equal(v[1], crypto.decode_base64((v[2]:gsub("=", ""))))
    end
  end)

  it("agrees with coreutils' base64 across the 768-byte slices, every byte value included", function()
    local bytes = {}
    for i = 0, 2999 do bytes[#bytes + 1] = string.char((i * 7 + math.floor(i / 256)) % 256) end
    local data = table.concat(bytes) .. "x"   -- 3001 bytes: a padded tail
    local path = h.tmpfile(data)
    local p = assert(io.popen("base64 -w0 " .. h.shell_quote(path)))
    local want = p:read("*a")
    p:close()
    assert.equal(4004, #want)
    assert.equal(want, crypto.encode_base64(data))
    assert.equal((want:gsub("=+$", "")), crypto.encode_base64(data, true))
    assert.equal(data, crypto.decode_base64(want))
  end)

  it("decode_base64 returns nil for what is not base64", function()
    for _, bad in ipairs { "Zm9v!", "Zm 9v", "Z", "Zm9vY", "QQ=", "QQ===", "Q===", "QQ==QQ==", "Zm9v\n" } do
      assert.is_nil(crypto.decode_base64(bad), bad)
    end
  end)

  it("decodes the url-unsafe alphabet only ('+' and '/')", function()
    assert.equal("\251\255\191", crypto.decode_base64("+/+/"))
    assert.is_nil(crypto.decode_base64("-_-_"))
  end)
end)

describe("random_bytes", function()
  it("returns n bytes, different each call", function()
    assert.equal("", crypto.random_bytes(0))
    local a, b = crypto.random_bytes(32), crypto.random_bytes(32)
    assert.equal(32, #a)
    assert.are_not.equal(a, b)
    assert.equal(4096, #crypto.random_bytes(4096))
  end)

  it("uses every byte value over many draws", function()
    local seen, count = {}, 0
    local s = crypto.random_bytes(4096) .. crypto.random_bytes(4096)
    for i = 1, #s do
      local c = s:byte(i)
      if not seen[c] then
        seen[c] = true
        count = count + 1
      end
    end
    assert.is_true(count > 250)   -- 8192 uniform draws miss a value with p ~ 1e-12
  end)

  it("raises on sizes out of 0..4096, huge ones too", function()
    assert.has_error(function() crypto.random_bytes(-1) end)
    assert.has_error(function() crypto.random_bytes(4097) end)
    assert.has_error(function() crypto.random_bytes(2 ^ 32 + 5) end)
    assert.has_error(function() crypto.random_bytes("x") end)
  end)
end)
