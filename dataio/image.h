// image.h: decoding image files to 8-bit RGB. PNG through libpng (1 to 16 bits; grey, grey+alpha,
// RGB, RGBA, palette; interlaced), JPEG through libjpeg-turbo (or stb_image in builds without
// it), WebP through libwebp, GIF, BMP and binary PNM through stb_image. Besides the whole image, a decode can be asked
// for a window of it only, and for JPEG at a reduced scale, which is what training crops need
// (image_part below). Bad input is never a crash: every failure is a status with a message
// naming the file and the problem. Must not depend on MPI, a backend or the model.
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
  VT_IMG_NO_DECODER,   // a format this build has no decoder for (built without its library):
                       // not the file's fault, so the loader stops instead of skipping it
} vt_image_status;

typedef enum {
  VT_FMT_UNKNOWN = 0,
  VT_FMT_PNG,
  VT_FMT_JPEG,
  VT_FMT_GIF,
  VT_FMT_BMP,
  VT_FMT_PNM,
  VT_FMT_WEBP,
} vt_image_format;

typedef struct {
  int width, height;
  uint8_t *rgb;  // (height, width, 3), row-major, owned
} vt_image;

// Decodes bytes (format found from the content, not the name). max_pixels bounds width*height
// and is checked from the header before any pixel buffer is allocated (<= 0: no limit of ours).
// On failure *out is empty and err says what is wrong ("truncated PNG: ...").
// Conversions: alpha and tRNS transparency are dropped (as PIL's convert("RGB")), 16-bit samples
// become round(v / 257) (libpng's scale_16), grey below 8 bits v * 255 / (2^bits - 1), no gamma.
// JPEG: libjpeg-turbo with its defaults (accurate integer IDCT, fancy upsampling), which is what
// Pillow runs, so the pixels are Pillow's; grey is replicated, CMYK/YCCK become RGB as Pillow's
// open + convert("RGB") does (CMYK taken as Adobe-inverted, as Pillow takes it); 12-bit,
// lossless and other component counts are VT_IMG_UNSUPPORTED; more than 100 scans is
// VT_IMG_CORRUPT (each scan walks every block again, so a small file of thousands of scans would
// take minutes). Corrupt entropy-coded data is decoded as well as libjpeg can (grey blocks, no
// error), as Pillow does; a file cut before its EOI marker is VT_IMG_TRUNCATED; other errors
// after every row is decoded are ignored. WebP (lossy and lossless) through libwebp with its
// defaults, Pillow's decoder: Pillow's pixels; an animated WebP is VT_IMG_UNSUPPORTED, a file
// shorter than its RIFF header declares VT_IMG_TRUNCATED. GIF (first frame), BMP and binary PNM
// (and JPEG in builds without libjpeg) go through stb_image; TGA, PSD, PIC, HDR and anything else
// are VT_IMG_UNSUPPORTED.
// Safe to call from several threads at once.
vt_image_status vt_image_decode(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                vt_image *out, char *err, size_t errlen);
// Reads path and decodes it; messages name the path.
vt_image_status vt_image_load(const char *path, int64_t max_pixels, vt_image *out, char *err,
                              size_t errlen);
// Reads a whole file into *bytes (malloc'd, the caller frees it), refusing files larger than
// any image of max_pixels could be (16 bytes a pixel + 64 MiB) before reading them. Messages
// name the path.
vt_image_status vt_image_read_file(const char *path, int64_t max_pixels, uint8_t **bytes,
                                   size_t *nbytes, char *err, size_t errlen);
void vt_image_free(vt_image *img);
const char *vt_image_status_name(vt_image_status s);
// The JPEG decoder of this build: "libjpeg-turbo X.Y.Z", "stb_image" or "none".
const char *vt_image_jpeg_decoder(void);
// The WebP decoder of this build: "libwebp" or "none".
const char *vt_image_webp_decoder(void);
// Every format's decoder in this build, one line: "PNG libpng, JPEG libjpeg-turbo 2.1.5, ...".
void vt_image_decoders(char *buf, size_t size);
// For a file named name (a path, or a shard's "SHARD.tar:MEMBER"): NULL where this build decodes
// files of its extension (or the extension is none of the decoders'), else what it lacks, such
// as "libpng (PNG files)". By the name alone: decoding goes by the file's first bytes, so a PNG
// named .jpg is judged a JPEG here (the loader's VT_IMG_NO_DECODER catches what this misses).
const char *vt_image_decoder_missing(const char *name);

// ---- header probe and partial decode (training crops) -----------------------------------------
typedef struct {
  vt_image_format format;
  int width, height;  // full size
  int max_scale;      // largest reduction 1/d vt_image_decode_part can do: 8 for JPEG through
                      // libjpeg (DCT scaling), 1 for everything else
} vt_image_info;

// The header only: format, size, and the checks that need no pixels (signature, header sanity,
// max_pixels, for JPEG the colour space). No pixel buffer is allocated. A status other than OK
// is what vt_image_decode would return for most damage in the header (the decode itself checks
// everything again).
vt_image_status vt_image_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                               vt_image_info *info, char *err, size_t errlen);

// Size of the image at reduction 1/scale: ceil(full / scale), as libjpeg's DCT scaling gives.
static inline int vt_image_scaled_side(int full, int scale) { return (full + scale - 1) / scale; }

// What a partial decode must deliver: pixels [x0, x1] x [y0, y1] (inclusive) of the image
// reduced to 1/scale (scale 1, 2, 4 or 8; a decoder that cannot reduce uses 1).
typedef struct {
  int scale;
  int x0, y0, x1, y1;  // in pixels of the reduced image (vt_image_scaled_side of the full size)
} vt_image_region;

// The result: a window of the reduced image that contains the region asked for.
typedef struct {
  vt_image win;             // the window's pixels, win.width x win.height
  int x0, y0;               // the window's top-left pixel in the reduced image
  int scale;                // the reduction used: 1/scale
  int width, height;        // the reduced image's size: vt_image_scaled_side(full, scale)
  int full_width, full_height;
} vt_image_part;

// Decodes only what the region needs, where the format allows:
//   JPEG (libjpeg-turbo): DCT scaling to 1/scale (the IDCT of each 8x8 block's low frequencies
//     at 8/scale pixels: an area filter close to a box average, far cheaper than decoding in full
//     and resampling; 4:2:2-like files stop at 1/4, where 1/8 would lose smooth chroma
//     upsampling), columns cropped to whole iMCUs around the region (jpeg_crop_scanline; not
//     for progressive files with coefficients never completed, which libjpeg smooths across
//     blocks), rows above it skipped (jpeg_skip_scanlines: entropy-decoded, not transformed),
//     decoding stopped after the region's last row. A margin of 2 pixels beyond the region
//     absorbs the edge effects of cropped fancy upsampling, so the region's pixels equal those
//     of a whole decode at the same scale.
//   PNG, non-interlaced: rows decoded up to the region's last row, then the decode stops; the
//     window holds the region's rows and columns only. Interlaced PNG decodes in full.
//   Anything else: the whole image at scale 1.
// A decoder that cannot reduce as far as region->scale uses the largest scale it can (PNG and
// stb_image: 1) and maps the region onto it, covering the same full-size pixels.
// Whole-file damage is judged as vt_image_decode would, without decoding what is not needed:
// a PNG's chunks past the stop are walked and their CRCs checked, so a cut file is
// VT_IMG_TRUNCATED and an IDAT with a bad CRC VT_IMG_CORRUPT whatever the region (anything the
// walk finds odd is decoded on to the end, for the whole decode's own verdict); a JPEG must end
// with its EOI marker and hold no other marker inside a single scan's data (the usual mark of
// overwritten bytes, which Pillow's whole decode fails on), or the decode goes on through
// every row and reads on to the end marker (a cut file is VT_IMG_TRUNCATED, a stray marker
// VT_IMG_CORRUPT). What a stop cannot see: PNG compressed data changed under a recomputed CRC
// that still inflates (deflate's Adler-32 ends the stream, past the stop; a stopping decode
// does not compute it), and JPEG damage below the region that libjpeg would only warn about.
vt_image_status vt_image_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                     const vt_image_region *region, vt_image_part *out,
                                     char *err, size_t errlen);
void vt_image_part_free(vt_image_part *part);

#endif
