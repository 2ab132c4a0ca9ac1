// image.h: decoding image files to 8-bit RGB. PNG through libpng (1 to 16 bits; grey, grey+alpha,
// RGB, RGBA, palette; interlaced), JPEG and the other formats stb_image knows through stb_image.
// Bad input is never a crash: every failure is a status with a message naming the file and the
// problem. Must not depend on MPI, a backend or the model.
#ifndef VT_IMAGE_H
#define VT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  VT_IMG_OK = 0,
  VT_IMG_UNREADABLE,   // cannot open or read the file
  VT_IMG_EMPTY,        // zero bytes
  VT_IMG_TRUNCATED,    // ends before the image data does
  VT_IMG_CORRUPT,      // malformed data (bad header, CRC, compressed stream)
  VT_IMG_UNSUPPORTED,  // not an image format we decode
  VT_IMG_TOO_LARGE,    // more pixels than the limit (decompression bomb)
} vt_image_status;

typedef struct {
  int width, height;
  uint8_t *rgb;  // (height, width, 3), row-major, owned
} vt_image;

// Decodes bytes (format found from the content, not the name). max_pixels bounds width*height
// and is checked from the header before any pixel buffer is allocated (<= 0: no limit of ours).
// On failure *out is empty and err says what is wrong ("truncated PNG: ...").
// Conversions: alpha and tRNS transparency are dropped (as PIL's convert("RGB")), 16-bit samples
// become round(v / 257) (libpng's scale_16), grey below 8 bits v * 255 / (2^bits - 1), no gamma.
// JPEG, GIF (first frame), BMP and binary PNM go through stb_image; TGA, PSD, PIC, HDR and
// anything else are VT_IMG_UNSUPPORTED. Safe to call from several threads at once.
vt_image_status vt_image_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                vt_image *out, char *err, size_t errlen);
// Reads path and decodes it; messages name the path.
vt_image_status vt_image_load(const char *path, int64_t max_pixels, vt_image *out, char *err,
                              size_t errlen);
void vt_image_free(vt_image *img);
const char *vt_image_status_name(vt_image_status s);

#endif
