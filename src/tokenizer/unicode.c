// UTF-8 helpers for the tokenizer: strict decoding, U+FFFD substitution of maximal invalid
// subparts (the Unicode "best practice" Python and Rust follow), and the GPT-2 byte-level
// alphabet that spells every byte as a printable code point.
#include <string.h>

#include "tokenizer/tokenizer_impl.h"

// bytes_to_unicode() of GPT-2: printable Latin-1 bytes spell themselves, the other 68 bytes
// take U+0100.. in byte order.
const uint16_t byte_level_cp[256] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10a, 0x10b, 0x10c,
    0x10d, 0x10e, 0x10f, 0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117, 0x118, 0x119,
    0x11a, 0x11b, 0x11c, 0x11d, 0x11e, 0x11f, 0x120, 0x021, 0x022, 0x023, 0x024, 0x025, 0x026,
    0x027, 0x028, 0x029, 0x02a, 0x02b, 0x02c, 0x02d, 0x02e, 0x02f, 0x030, 0x031, 0x032, 0x033,
    0x034, 0x035, 0x036, 0x037, 0x038, 0x039, 0x03a, 0x03b, 0x03c, 0x03d, 0x03e, 0x03f, 0x040,
    0x041, 0x042, 0x043, 0x044, 0x045, 0x046, 0x047, 0x048, 0x049, 0x04a, 0x04b, 0x04c, 0x04d,
    0x04e, 0x04f, 0x050, 0x051, 0x052, 0x053, 0x054, 0x055, 0x056, 0x057, 0x058, 0x059, 0x05a,
    0x05b, 0x05c, 0x05d, 0x05e, 0x05f, 0x060, 0x061, 0x062, 0x063, 0x064, 0x065, 0x066, 0x067,
    0x068, 0x069, 0x06a, 0x06b, 0x06c, 0x06d, 0x06e, 0x06f, 0x070, 0x071, 0x072, 0x073, 0x074,
    0x075, 0x076, 0x077, 0x078, 0x079, 0x07a, 0x07b, 0x07c, 0x07d, 0x07e, 0x121, 0x122, 0x123,
    0x124, 0x125, 0x126, 0x127, 0x128, 0x129, 0x12a, 0x12b, 0x12c, 0x12d, 0x12e, 0x12f, 0x130,
    0x131, 0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13a, 0x13b, 0x13c, 0x13d,
    0x13e, 0x13f, 0x140, 0x141, 0x142, 0x0a1, 0x0a2, 0x0a3, 0x0a4, 0x0a5, 0x0a6, 0x0a7, 0x0a8,
    0x0a9, 0x0aa, 0x0ab, 0x0ac, 0x143, 0x0ae, 0x0af, 0x0b0, 0x0b1, 0x0b2, 0x0b3, 0x0b4, 0x0b5,
    0x0b6, 0x0b7, 0x0b8, 0x0b9, 0x0ba, 0x0bb, 0x0bc, 0x0bd, 0x0be, 0x0bf, 0x0c0, 0x0c1, 0x0c2,
    0x0c3, 0x0c4, 0x0c5, 0x0c6, 0x0c7, 0x0c8, 0x0c9, 0x0ca, 0x0cb, 0x0cc, 0x0cd, 0x0ce, 0x0cf,
    0x0d0, 0x0d1, 0x0d2, 0x0d3, 0x0d4, 0x0d5, 0x0d6, 0x0d7, 0x0d8, 0x0d9, 0x0da, 0x0db, 0x0dc,
    0x0dd, 0x0de, 0x0df, 0x0e0, 0x0e1, 0x0e2, 0x0e3, 0x0e4, 0x0e5, 0x0e6, 0x0e7, 0x0e8, 0x0e9,
    0x0ea, 0x0eb, 0x0ec, 0x0ed, 0x0ee, 0x0ef, 0x0f0, 0x0f1, 0x0f2, 0x0f3, 0x0f4, 0x0f5, 0x0f6,
    0x0f7, 0x0f8, 0x0f9, 0x0fa, 0x0fb, 0x0fc, 0x0fd, 0x0fe, 0x0ff,
};

// The byte a byte-level code point spells, or -1.
static int byte_level_byte(int32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff))
        return cp;
    if (cp >= 0x100 && cp <= 0x120)
        return cp - 0x100; // bytes 0x00..0x20
    if (cp >= 0x121 && cp <= 0x142)
        return cp - 0x121 + 0x7f; // bytes 0x7f..0xa0
    if (cp == 0x143)
        return 0xad;
    return -1;
}

// Classifies the sequence at p: 1 = valid (*len = its length), 0 = invalid (*len = length of
// the maximal subpart to replace), -1 = truncated by the end of the buffer (*len = n).
static int utf8_check(const uint8_t *p, size_t n, size_t *len)
{
    uint8_t b = p[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf; // allowed range of the second byte
    if (b < 0x80) {
        *len = 1;
        return 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
        need = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
        need = 3;
        if (b == 0xe0)
            lo = 0xa0;
        else if (b == 0xed)
            hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4;
        if (b == 0xf0)
            lo = 0x90;
        else if (b == 0xf4)
            hi = 0x8f;
    } else {
        *len = 1;
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return -1;
        }
        uint8_t c = p[i];
        bool ok = i == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xbf);
        if (!ok) {
            *len = i;
            return 0;
        }
    }
    *len = need;
    return 1;
}

size_t unicode_utf8_seq_len(const char *p, size_t n)
{
    size_t len;
    return utf8_check((const uint8_t *)p, n, &len) == 1 ? len : 1;
}

size_t unicode_utf8_decode(const char *p, size_t n, int32_t *cp)
{
    const uint8_t *s = (const uint8_t *)p;
    size_t len;
    if (utf8_check(s, n, &len) != 1) {
        *cp = -1;
        return 1;
    }
    switch (len) {
    case 1:
        *cp = s[0];
        break;
    case 2:
        *cp = ((s[0] & 0x1f) << 6) | (s[1] & 0x3f);
        break;
    case 3:
        *cp = ((s[0] & 0x0f) << 12) | ((s[1] & 0x3f) << 6) | (s[2] & 0x3f);
        break;
    default:
        *cp = ((s[0] & 0x07) << 18) | ((s[1] & 0x3f) << 12) | ((s[2] & 0x3f) << 6) | (s[3] & 0x3f);
        break;
    }
    return len;
}

size_t unicode_utf8_encode(int32_t cp, char out[4])
{
    uint32_t c = (uint32_t)cp;
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

bool unicode_utf8_append_sanitized(struct tok_bytes *out, const char *p, size_t n)
{
    static const char replacement[3] = {(char)0xef, (char)0xbf, (char)0xbd};
    size_t i = 0, run = 0; // [run, i) is valid text not yet appended
    while (i < n) {
        size_t len;
        int r = utf8_check((const uint8_t *)p + i, n - i, &len);
        if (r == 1) {
            i += len;
            continue;
        }
        if (!tok_bytes_append(out, p + run, i - run) ||
            !tok_bytes_append(out, replacement, sizeof(replacement)))
            return false;
        i += len;
        run = i;
    }
    return tok_bytes_append(out, p + run, n - run);
}

size_t unicode_utf8_complete_prefix(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t len;
        if (utf8_check((const uint8_t *)p + i, n - i, &len) < 0)
            return i;
        i += len;
    }
    return n;
}

bool byte_level_unmap(const char *text, size_t n, struct tok_bytes *out)
{
    out->len = 0;
    if (!tok_bytes_reserve(out, n + 1))
        return false;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        i += unicode_utf8_decode(text + i, n - i, &cp);
        int b = cp < 0 ? -1 : byte_level_byte(cp);
        if (b < 0)
            return false;
        out->ptr[out->len++] = (char)b;
    }
    out->ptr[out->len] = '\0';
    return true;
}

bool byte_level_map(const char *bytes, size_t n, struct tok_bytes *out)
{
    out->len = 0;
    for (size_t i = 0; i < n; i++) {
        char buf[4];
        size_t k = unicode_utf8_encode(byte_level_cp[(uint8_t)bytes[i]], buf);
        if (!tok_bytes_append(out, buf, k))
            return false;
    }
    return true;
}
