/* The zigzag varint reader the C extensions share (_records.c, _cleaner.c): Kafka's v2 records
 * write every length, delta and size this way. Included, not linked: each extension is one
 * translation unit, so the function is static and inlines where it is called.
 */
#ifndef ODRADEK_VARINT_H
#define ODRADEK_VARINT_H

#include <stdint.h>

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} cursor;

/* Reads a zigzag varint of at most `max_bytes` bytes; 0 on success. */
static inline int read_varint(cursor *c, int max_bytes, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->p >= c->end) return -1;
        unsigned char b = *c->p++;
        value |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 0;
        }
        shift += 7;
    }
    return -2;
}

#endif
