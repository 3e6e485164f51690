-- Installed by make install as cohost.lua in the stand-alone Lua's module
-- directories (/usr/local/share/lua/5.1 .. 5.4), where cohost's own
-- modules are not: plain `lua` or `busted` requiring "cohost" then gets
-- one line saying what to run instead of a list of searched paths. The
-- cohost program finds its own lua/cohost/init.lua first.
error("cohost: these modules run inside the cohost program: run specs with `cohost --test` or `busted --lua=cohost`, scripts with `cohost app.lua` (docs/testing-apps.md)", 0)
