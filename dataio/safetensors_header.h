// safetensors_header.h: what the two halves of the safetensors code share (safetensors.c: files,
// writer, lookups; safetensors_header.c: the header parser and its checks). Internal to dataio.
#ifndef VT_SAFETENSORS_HEADER_H
#define VT_SAFETENSORS_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

// Parses and validates the header text into f (emptied first); data_nbytes is what follows it.
vt_status vt_st_read_header(const char *hdr, size_t hlen, int64_t data_nbytes, const char *what,
                            vt_st_file *f, char *err, size_t errlen);
// "WHAT: message" into err; returns VT_ERR_INPUT.
vt_status vt_st_refuse(char *err, size_t errlen, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Length of the UTF-8 sequence at s (1-4), 0 when it is not valid UTF-8.
int vt_st_utf8_len(const unsigned char *s, size_t n);

#endif
