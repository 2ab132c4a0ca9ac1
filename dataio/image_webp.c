// image_webp.c: WebP (lossy VP8, lossless VP8L, with or without alpha) to 8-bit RGB through
// libwebp, the library Pillow decodes WebP with, and with its defaults (fancy upsampling), so the
// pixels are Pillow's convert("RGB") of the file. A decode is always of the whole image (the
// window of a training crop is cut from it by the crop). Animated files are refused as
// unsupported. Compiled without libwebp (VT_HAVE_WEBP undefined) every WebP file is unsupported,
// with a message that says how to build with it. No MPI, backend or model, and no global state:
// decoder threads call it concurrently.
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

#ifdef VT_HAVE_WEBP
#include <webp/decode.h>

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// The size the RIFF header declares (the whole file), or 0 where the header is cut.
static size_t riff_size(const uint8_t *bytes, size_t nbytes) {
  return nbytes >= 12 ? (size_t)le32(bytes + 4) + 8 : 0;
}

// A libwebp status as a vit3d one, with the message; cut: the file is shorter than its header
// says, which turns libwebp's "not enough data" (and the errors of a cut bitstream) into
// VT_IMG_TRUNCATED.
static vt_image_status from_vp8(VP8StatusCode code, const uint8_t *bytes, size_t nbytes,
                                const char *where, char *err, size_t errlen) {
  const size_t want = riff_size(bytes, nbytes);
  if (code == VP8_STATUS_NOT_ENOUGH_DATA || (want > nbytes && code != VP8_STATUS_OK)) {
    if (want > nbytes)
      vt_img_set_err(err, errlen, "truncated WebP: the file ends after %zu of the %zu bytes its "
                     "header declares", nbytes, want);
    else
      vt_img_set_err(err, errlen, "truncated WebP: the %s ends before its data does", where);
    return VT_IMG_TRUNCATED;
  }
  if (code == VP8_STATUS_UNSUPPORTED_FEATURE) {
    vt_img_set_err(err, errlen, "WebP %s with a feature this libwebp cannot decode", where);
    return VT_IMG_UNSUPPORTED;
  }
  static const char *const why[] = {"ok", "out of memory", "invalid parameter",
                                    "bitstream error", "unsupported feature", "suspended",
                                    "user abort", "not enough data"};
  vt_img_set_err(err, errlen, "corrupt WebP %s: %s", where,
                 (unsigned)code < sizeof why / sizeof why[0] ? why[code] : "unknown error");
  return code == VP8_STATUS_OUT_OF_MEMORY ? VT_IMG_TOO_LARGE : VT_IMG_CORRUPT;
}

static vt_image_status webp_header(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                   vt_image_info *info, char *err, size_t errlen) {
  memset(info, 0, sizeof *info);
  WebPBitstreamFeatures f;
  VP8StatusCode code = WebPGetFeatures(bytes, nbytes, &f);
  if (code != VP8_STATUS_OK) return from_vp8(code, bytes, nbytes, "header", err, errlen);
  if (f.has_animation) {
    vt_img_set_err(err, errlen, "animated WebP: vit3d decodes still images (save the frame "
                   "to train on as a still WebP, PNG or JPEG)");
    return VT_IMG_UNSUPPORTED;
  }
  if (f.width <= 0 || f.height <= 0) {
    vt_img_set_err(err, errlen, "corrupt WebP: image size %dx%d", f.width, f.height);
    return VT_IMG_CORRUPT;
  }
  if (vt_img_too_many_pixels(f.width, f.height, max_pixels)) {
    vt_img_set_err(err, errlen, "WebP of %dx%d pixels is over the limit of %lld pixels", f.width,
                   f.height, (long long)max_pixels);
    return VT_IMG_TOO_LARGE;
  }
  *info = (vt_image_info){VT_FMT_WEBP, f.width, f.height, 1};
  return VT_IMG_OK;
}

vt_image_status vt_webp_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                              vt_image_info *info, char *err, size_t errlen) {
  return webp_header(bytes, nbytes, max_pixels, info, err, errlen);
}

vt_image_status vt_webp_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                    const vt_image_region *region, vt_image_part *out, char *err,
                                    size_t errlen) {
  (void)region;  // always the whole image, at scale 1
  memset(out, 0, sizeof *out);
  vt_image_info info;
  vt_image_status st = webp_header(bytes, nbytes, max_pixels, &info, err, errlen);
  if (st != VT_IMG_OK) return st;
  const size_t stride = (size_t)info.width * 3, size = stride * (size_t)info.height;
  uint8_t *rgb = malloc(size);
  if (!rgb) {
    vt_img_set_err(err, errlen, "not enough memory for a WebP of %dx%d pixels", info.width,
                   info.height);
    return VT_IMG_TOO_LARGE;
  }
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {  // a libwebp whose ABI differs from its header's
    free(rgb);
    vt_img_set_err(err, errlen, "libwebp's decoder does not match the header vit3d was built with");
    return VT_IMG_UNSUPPORTED;
  }
  config.output.colorspace = MODE_RGB;  // alpha dropped, as Pillow's convert("RGB")
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = rgb;
  config.output.u.RGBA.stride = (int)stride;
  config.output.u.RGBA.size = size;
  VP8StatusCode code = WebPDecode(bytes, nbytes, &config);
  WebPFreeDecBuffer(&config.output);  // external memory: frees nothing of ours
  if (code != VP8_STATUS_OK) {
    free(rgb);
    return from_vp8(code, bytes, nbytes, "image data", err, errlen);
  }
  out->win = (vt_image){info.width, info.height, rgb};
  out->scale = 1;
  out->width = out->full_width = info.width;
  out->height = out->full_height = info.height;
  return VT_IMG_OK;
}

const char *vt_webp_version(void) { return "libwebp"; }
#else
static const char no_libwebp[] =
    "WebP file, but this vit3d was built without libwebp (install libwebp-dev, build with "
    "-DVT_WEBP=ON)";

vt_image_status vt_webp_probe(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                              vt_image_info *info, char *err, size_t errlen) {
  (void)bytes, (void)nbytes, (void)max_pixels;
  memset(info, 0, sizeof *info);
  vt_img_set_err(err, errlen, "%s", no_libwebp);
  return VT_IMG_NO_DECODER;
}

vt_image_status vt_webp_decode_part(const uint8_t *bytes, size_t nbytes, int64_t max_pixels,
                                    const vt_image_region *region, vt_image_part *out, char *err,
                                    size_t errlen) {
  (void)bytes, (void)nbytes, (void)max_pixels, (void)region;
  memset(out, 0, sizeof *out);
  vt_img_set_err(err, errlen, "%s", no_libwebp);
  return VT_IMG_NO_DECODER;
}

const char *vt_webp_version(void) { return "none"; }
#endif
