/*
** What lib_postgres.c and lib_postgres_rows.c share: the type OIDs both
** sides name, the registry keys of the marks, and the reader of results.
*/
#ifndef CH_LIB_POSTGRES_H
#define CH_LIB_POSTGRES_H

#include <libpq-fe.h>
#include <lua.h>

#include "net/pg.h"

#define REG_ARRAY_MT "cohost.postgres.array_mt"  /* cohost.http's array mark */
#define REG_INT64    "cohost.postgres.int64"     /* 8 bytes -> int64 cdata */
#define REG_INT64TXT "cohost.postgres.int64text" /* cdata -> digits or nil */
#define REG_BYTEA_MT "cohost.postgres.bytea"     /* pg.bytea(s)'s metatable */
#define REG_JSON_MT  "cohost.postgres.json"      /* pg.json(v)'s metatable */

enum {
  OID_BOOL = 16, OID_BYTEA = 17, OID_CHAR = 18, OID_NAME = 19, OID_INT8 = 20,
  OID_INT2 = 21, OID_INT4 = 23, OID_TEXT = 25, OID_OID = 26, OID_JSON = 114,
  OID_FLOAT4 = 700, OID_FLOAT8 = 701, OID_BPCHAR = 1042, OID_VARCHAR = 1043,
  OID_DATE = 1082, OID_TIMESTAMP = 1114, OID_TIMESTAMPTZ = 1184,
  OID_NUMERIC = 1700, OID_UUID = 2950, OID_JSONB = 3802
};

/* Pushes a successful result's rows as Lua values (each column by its
** type: numbers, booleans, int64 cdata, bytea, json and jsonb decoded,
** arrays of those marked as arrays), then the count of rows affected.
** Returns 2. Raises a Lua error on a bug (text the server would not
** send) or out of memory. */
int ch_pg_push_rows(lua_State *L, struct ch_pg_stmt *st, const PGresult *res);

#endif
