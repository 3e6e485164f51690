/*
** UTF-8 validation for Lua code through the FFI (cohost.protobuf checks
** every proto3 string field with it on the way in and out).
*/
#ifndef CH_UTF8_H
#define CH_UTF8_H

#include <stddef.h>

/* 1 when the n bytes at s are well-formed UTF-8 (RFC 3629: no overlong
** forms, no surrogates, nothing past U+10FFFF), else 0. Does not yield;
** exported for ffi.C. */
int ch_utf8_valid(const unsigned char *s, size_t n);

#endif
