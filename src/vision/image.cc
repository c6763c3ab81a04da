#include "vision/image.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>

namespace cachet {

namespace {

Status check_size(int64_t w, int64_t h, const ImageLimits& lim) {
  if (w <= 0 || h <= 0) return invalid_argument("the image has no pixels (" + std::to_string(w) + "x" +
                                                std::to_string(h) + ")");
  if (w > lim.max_side || h > lim.max_side)
    return invalid_argument("the image is " + std::to_string(w) + "x" + std::to_string(h) + ": a side is over " +
                            std::to_string(lim.max_side) + " pixels");
  if (w * h > lim.max_pixels)
    return invalid_argument("the image is " + std::to_string(w) + "x" + std::to_string(h) + ", over " +
                            std::to_string(lim.max_pixels) + " pixels");
  return Status::ok();
}

// libjpeg reports errors through a callback that must not return: it jumps back here with the message.
struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated = false;
};

struct JpegProgress {
  jpeg_progress_mgr mgr;
  int max_scans;
};

[[noreturn]] void jpeg_fail(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings (damaged but decodable data) are not errors, except the data ending early: libjpeg would fill the
// rest of the image with grey, a picture the client never sent.
void jpeg_warning(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegError*>(c->err)->truncated = true;
}

void jpeg_scans(j_common_ptr c) {
  auto* p = reinterpret_cast<JpegProgress*>(c->progress);
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (c->is_decompressor && d->input_scan_number > p->max_scans) {
    std::snprintf(reinterpret_cast<JpegError*>(c->err)->message, JMSG_LENGTH_MAX, "over %d progressive scans",
                  p->max_scans);
    std::longjmp(reinterpret_cast<JpegError*>(c->err)->jump, 1);
  }
}

// Everything the decoder allocates lives in these (no automatic object may be live across a longjmp).
Result<Image> decode_jpeg(const uint8_t* data, size_t n, const ImageLimits& lim) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  JpegProgress progress;
  Image* img = new Image();
  std::string* why = new std::string();
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_warning;
  if (setjmp(err.jump)) {
    Status st = invalid_argument("not a decodable JPEG: " + (why->empty() ? std::string(err.message) : *why));
    jpeg_destroy_decompress(&cinfo);
    delete img;
    delete why;
    return st;
  }
  jpeg_create_decompress(&cinfo);
  progress.mgr.progress_monitor = jpeg_scans;
  progress.max_scans = lim.max_jpeg_scans;
  cinfo.progress = &progress.mgr;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  if (Status st = check_size(cinfo.image_width, cinfo.image_height, lim); !st.is_ok()) {
    *why = st.message();
    jpeg_destroy_decompress(&cinfo);
    delete img;
    delete why;
    return st;
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    delete img;
    delete why;
    return invalid_argument("CMYK JPEGs are not supported: convert the image to RGB");
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  img->width = static_cast<int>(cinfo.output_width);
  img->height = static_cast<int>(cinfo.output_height);
  img->rgb.resize(static_cast<size_t>(img->width) * img->height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img->rgb.data() + static_cast<size_t>(cinfo.output_scanline) * img->width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.truncated) {
    delete img;
    delete why;
    return invalid_argument("the JPEG data ends early (truncated)");
  }
  Image out = std::move(*img);
  delete img;
  delete why;
  return out;
}

Result<Image> decode_png(const uint8_t* data, size_t n, const ImageLimits& lim) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, n))
    return invalid_argument(std::string("not a decodable PNG: ") + png.message);
  if (Status st = check_size(png.width, png.height, lim); !st.is_ok()) {
    png_image_free(&png);
    return st;
  }
  png.format = PNG_FORMAT_RGBA;  // alpha kept here, then dropped: never composited
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, rgba.data(), 0, nullptr)) {
    std::string m = png.message;
    png_image_free(&png);
    return invalid_argument("not a decodable PNG: " + m);
  }
  Image img;
  img.width = static_cast<int>(png.width);
  img.height = static_cast<int>(png.height);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (size_t i = 0, p = static_cast<size_t>(img.width) * img.height; i < p; ++i)
    std::memcpy(&img.rgb[i * 3], &rgba[i * 4], 3);
  return img;
}

Result<Image> decode_webp(const uint8_t* data, size_t n, const ImageLimits& lim) {
  int w = 0, h = 0;
  if (!WebPGetInfo(data, n, &w, &h)) return invalid_argument("not a decodable WebP image");
  CACHET_RETURN_IF_ERROR(check_size(w, h, lim));
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  if (!WebPDecodeRGBInto(data, n, img.rgb.data(), img.rgb.size(), w * 3))
    return invalid_argument("not a decodable WebP image: its data is damaged or truncated");
  return img;
}

}  // namespace

std::string image_format(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return "jpeg";
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return "png";
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) return "webp";
  return "";
}

Result<Image> decode_image(const uint8_t* data, size_t n, const ImageLimits& limits) {
  if (n == 0) return invalid_argument("the image is empty (0 bytes)");
  if (n > limits.max_bytes)
    return invalid_argument("the image is " + std::to_string(n) + " bytes, over the " +
                            std::to_string(limits.max_bytes) + "-byte limit");
  const std::string f = image_format(data, n);
  if (f == "jpeg") return decode_jpeg(data, n, limits);
  if (f == "png") return decode_png(data, n, limits);
  if (f == "webp") return decode_webp(data, n, limits);
  return invalid_argument("not an image cachet reads: JPEG, PNG and WebP are (judged by the first bytes)");
}

Result<Image> load_image(const std::string& path, const ImageLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open image '" + path + "'");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return io_error("cannot read image '" + path + "'");
  if (static_cast<uint64_t>(size) > limits.max_bytes)
    return invalid_argument("image '" + path + "' is " + std::to_string(size) + " bytes, over the " +
                            std::to_string(limits.max_bytes) + "-byte limit");
  in.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (!in) return io_error("cannot read image '" + path + "'");
  Result<Image> r = decode_image(bytes.data(), bytes.size(), limits);
  if (!r.is_ok()) return r.status().with_context(path);
  return r;
}

}  // namespace cachet
