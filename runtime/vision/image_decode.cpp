// Image decoding with the libraries Pillow itself links (libpng, libjpeg-turbo, libwebp,
// giflib), producing the modes Pillow would open (image.hpp). Every decoder checks the pixel
// count from the header before allocating (decompression bombs) and reports failures as
// image_error(400) with the library's message.
#include "runtime/vision/image.hpp"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include <gif_lib.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>

namespace k3::vision {
namespace {

[[noreturn]] void fail(const std::string& why) { throw image_error(400, why); }

void check_pixels(std::int64_t w, std::int64_t h, const decode_limits& lim, const char* fmt) {
  if (w <= 0 || h <= 0) fail(std::string("cannot decode the ") + fmt + " image: it has no pixels");
  if (w * h > lim.max_pixels)
    fail(std::string("the ") + fmt + " image is " + std::to_string(w) + "x" + std::to_string(h) + " = " +
         std::to_string(w * h) + " pixels, over the decompression-bomb limit of " + std::to_string(lim.max_pixels) +
         " pixels");
}

// ---- PNG ----------------------------------------------------------------------------------
struct png_src {
  const std::uint8_t* p;
  std::size_t n, off = 0;
};
struct png_err {
  std::jmp_buf jb;
  char msg[256] = {0};
};

image decode_png(const std::uint8_t* data, std::size_t size, const decode_limits& lim) {
  png_err err;
  png_structp png = png_create_read_struct(
      PNG_LIBPNG_VER_STRING, &err,
      [](png_structp p, png_const_charp m) {
        auto* e = static_cast<png_err*>(png_get_error_ptr(p));
        std::snprintf(e->msg, sizeof e->msg, "%s", m);
        std::longjmp(e->jb, 1);
      },
      [](png_structp, png_const_charp) {});
  if (!png) fail("cannot decode the png image: out of memory");
  png_infop info = png_create_info_struct(png);
  png_src src{data, size};
  image img;
  img.format = "png";
  std::vector<png_bytep> rows;
  std::vector<std::uint8_t> wide; // 16-bit grey before clipping
  // Nothing with a destructor may be created between setjmp and the longjmp.
  if (setjmp(err.jb)) {
    png_destroy_read_struct(&png, &info, nullptr);
    fail(std::string("cannot decode the png image: ") + err.msg);
  }
  png_set_read_fn(png, &src, [](png_structp p, png_bytep out, png_size_t len) {
    auto* s = static_cast<png_src*>(png_get_io_ptr(p));
    if (s->n - s->off < len) png_error(p, "truncated data");
    std::memcpy(out, s->p + s->off, len);
    s->off += len;
  });
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  try {
    check_pixels(w, h, lim, "png");
  } catch (...) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw;
  }
  img.width = static_cast<int>(w);
  img.height = static_cast<int>(h);
  bool clip16 = false;
  if (ct == PNG_COLOR_TYPE_PALETTE) {
    img.mode = pixel_mode::P;
    if (depth < 8) png_set_packing(png);
    png_colorp pal = nullptr;
    int npal = 0;
    png_get_PLTE(png, info, &pal, &npal);
    png_bytep trans = nullptr;
    int ntrans = 0;
    png_color_16p tc = nullptr;
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_get_tRNS(png, info, &trans, &ntrans, &tc);
    img.palette.assign(256, {0, 0, 0, 255});
    for (int i = 0; i < npal && i < 256; ++i)
      img.palette[static_cast<std::size_t>(i)] = {pal[i].red, pal[i].green, pal[i].blue,
                                                  static_cast<std::uint8_t>(i < ntrans ? trans[i] : 255)};
  } else if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA) {
    img.mode = ct == PNG_COLOR_TYPE_GRAY ? pixel_mode::L : pixel_mode::LA;
    if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    img.bilevel = depth == 1 && ct == PNG_COLOR_TYPE_GRAY;
    if (depth == 16 && ct == PNG_COLOR_TYPE_GRAY) clip16 = true; // Pillow I;16 → L clips
    else if (depth == 16) png_set_strip_16(png);
    if (ct == PNG_COLOR_TYPE_GRAY && png_get_valid(png, info, PNG_INFO_tRNS) && depth <= 8) {
      png_bytep t = nullptr;
      int nt = 0;
      png_color_16p tc = nullptr;
      png_get_tRNS(png, info, &t, &nt, &tc);
      const int scale = depth == 1 ? 255 : depth == 2 ? 85 : depth == 4 ? 17 : 1;
      const auto g = static_cast<std::uint8_t>(tc->gray * scale);
      img.color_key = std::array<std::uint8_t, 3>{g, g, g};
    }
  } else {
    img.mode = ct == PNG_COLOR_TYPE_RGB ? pixel_mode::RGB : pixel_mode::RGBA;
    if (depth == 16) png_set_strip_16(png);
    if (ct == PNG_COLOR_TYPE_RGB && png_get_valid(png, info, PNG_INFO_tRNS) && depth == 8) {
      png_bytep t = nullptr;
      int nt = 0;
      png_color_16p tc = nullptr;
      png_get_tRNS(png, info, &t, &nt, &tc);
      img.color_key = std::array<std::uint8_t, 3>{static_cast<std::uint8_t>(tc->red), static_cast<std::uint8_t>(tc->green),
                                                  static_cast<std::uint8_t>(tc->blue)};
    }
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t rowbytes = png_get_rowbytes(png, info);
  const int ch = channels(img.mode);
  if (!clip16 && rowbytes != static_cast<std::size_t>(w) * static_cast<std::size_t>(ch)) {
    png_destroy_read_struct(&png, &info, nullptr);
    fail("cannot decode the png image: unexpected row layout");
  }
  std::uint8_t* base;
  if (clip16) {
    wide.resize(rowbytes * h);
    base = wide.data();
  } else {
    img.px.resize(rowbytes * h);
    base = img.px.data();
  }
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = base + y * rowbytes;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  if (clip16) {
    img.px.resize(static_cast<std::size_t>(w) * h);
    for (std::size_t i = 0; i < img.px.size(); ++i) {
      const unsigned v = (static_cast<unsigned>(wide[2 * i]) << 8) | wide[2 * i + 1]; // big-endian
      img.px[i] = static_cast<std::uint8_t>(v > 255 ? 255 : v);
    }
  }
  return img;
}

// ---- JPEG ---------------------------------------------------------------------------------
struct jpeg_err {
  jpeg_error_mgr mgr;
  std::jmp_buf jb;
  char msg[JMSG_LENGTH_MAX] = {0};
};

image decode_jpeg(const std::uint8_t* data, std::size_t size, const decode_limits& lim) {
  jpeg_decompress_struct cinfo;
  jpeg_err err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = [](j_common_ptr c) {
    auto* e = reinterpret_cast<jpeg_err*>(c->err);
    (*c->err->format_message)(c, e->msg);
    std::longjmp(e->jb, 1);
  };
  err.mgr.output_message = [](j_common_ptr) {};
  image img;
  img.format = "jpeg";
  std::vector<std::uint8_t> cmyk;
  if (setjmp(err.jb)) {
    jpeg_destroy_decompress(&cinfo);
    fail(std::string("cannot decode the jpeg image: ") + err.msg);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // Pillow's defaults: islow DCT, fancy upsampling (libjpeg's own defaults).
  const bool is_cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  const bool grey = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  cinfo.out_color_space = is_cmyk ? JCS_CMYK : grey ? JCS_GRAYSCALE : JCS_RGB;
  if (static_cast<std::int64_t>(cinfo.image_width) * cinfo.image_height > lim.max_pixels || !cinfo.image_width) {
    const auto w = cinfo.image_width, h = cinfo.image_height;
    jpeg_destroy_decompress(&cinfo);
    check_pixels(w, h, lim, "jpeg");
  }
  jpeg_start_decompress(&cinfo);
  const int w = static_cast<int>(cinfo.output_width), h = static_cast<int>(cinfo.output_height);
  const int oc = cinfo.output_components;
  img.width = w;
  img.height = h;
  img.mode = grey ? pixel_mode::L : pixel_mode::RGB;
  std::uint8_t* base;
  if (is_cmyk) {
    cmyk.resize(static_cast<std::size_t>(w) * h * 4);
    base = cmyk.data();
  } else {
    img.px.resize(static_cast<std::size_t>(w) * h * static_cast<std::size_t>(oc));
    base = img.px.data();
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = base + static_cast<std::size_t>(cinfo.output_scanline) * static_cast<std::size_t>(w) * static_cast<std::size_t>(oc);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (is_cmyk) {
    // Pillow reads CMYK JPEGs as "CMYK;I" (Adobe's inverted convention), then cmyk2rgb.
    img.px.resize(static_cast<std::size_t>(w) * h * 3);
    auto muldiv255 = [](int a, int b) {
      const int t = a * b + 128;
      return ((t >> 8) + t) >> 8;
    };
    auto clip8 = [](int v) { return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); };
    for (std::size_t i = 0, n = static_cast<std::size_t>(w) * h; i < n; ++i) {
      const std::uint8_t* s = &cmyk[4 * i];
      const int c = 255 - s[0], m = 255 - s[1], y = 255 - s[2], k = 255 - s[3];
      const int nk = 255 - k;
      img.px[3 * i + 0] = clip8(nk - muldiv255(c, nk));
      img.px[3 * i + 1] = clip8(nk - muldiv255(m, nk));
      img.px[3 * i + 2] = clip8(nk - muldiv255(y, nk));
    }
  }
  return img;
}

// ---- WebP ---------------------------------------------------------------------------------
image decode_webp(const std::uint8_t* data, std::size_t size, const decode_limits& lim) {
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(data, size, &f) != VP8_STATUS_OK) fail("cannot decode the webp image: invalid bitstream");
  image img;
  img.format = "webp";
  if (f.has_animation) {
    WebPData wd{data, size};
    WebPAnimDecoderOptions o;
    WebPAnimDecoderOptionsInit(&o);
    o.color_mode = MODE_RGBA;
    std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> dec(WebPAnimDecoderNew(&wd, &o), WebPAnimDecoderDelete);
    if (!dec) fail("cannot decode the webp image: invalid animation");
    WebPAnimInfo ai;
    WebPAnimDecoderGetInfo(dec.get(), &ai);
    check_pixels(ai.canvas_width, ai.canvas_height, lim, "webp");
    std::uint8_t* buf = nullptr;
    int ts = 0;
    if (!WebPAnimDecoderGetNext(dec.get(), &buf, &ts)) fail("cannot decode the webp image: no frame");
    img.width = static_cast<int>(ai.canvas_width);
    img.height = static_cast<int>(ai.canvas_height);
    img.mode = pixel_mode::RGBA;
    img.px.assign(buf, buf + static_cast<std::size_t>(img.width) * img.height * 4);
    return img;
  }
  check_pixels(f.width, f.height, lim, "webp");
  img.width = f.width;
  img.height = f.height;
  img.mode = f.has_alpha ? pixel_mode::RGBA : pixel_mode::RGB;
  const int ch = channels(img.mode);
  img.px.resize(static_cast<std::size_t>(f.width) * f.height * static_cast<std::size_t>(ch));
  const int stride = f.width * ch;
  const auto* ok = f.has_alpha ? WebPDecodeRGBAInto(data, size, img.px.data(), img.px.size(), stride)
                               : WebPDecodeRGBInto(data, size, img.px.data(), img.px.size(), stride);
  if (!ok) fail("cannot decode the webp image: corrupt data");
  return img;
}

// ---- GIF ----------------------------------------------------------------------------------
// giflib's GifErrorString returns NULL for codes it does not know.
std::string gif_error(int code) {
  const char* m = GifErrorString(code);
  return m ? m : "error " + std::to_string(code);
}

struct gif_src {
  const std::uint8_t* p;
  std::size_t n, off = 0;
};

image decode_gif(const std::uint8_t* data, std::size_t size, const decode_limits& lim) {
  gif_src src{data, size};
  int e = 0;
  GifFileType* g = DGifOpen(&src, [](GifFileType* gf, GifByteType* out, int len) -> int {
    auto* s = static_cast<gif_src*>(gf->UserData);
    const std::size_t take = std::min<std::size_t>(static_cast<std::size_t>(len), s->n - s->off);
    std::memcpy(out, s->p + s->off, take);
    s->off += take;
    return static_cast<int>(take);
  }, &e);
  if (!g) fail(std::string("cannot decode the gif image: ") + gif_error(e));
  std::unique_ptr<GifFileType, void (*)(GifFileType*)> guard(g, [](GifFileType* x) {
    int ee = 0;
    DGifCloseFile(x, &ee);
  });
  check_pixels(g->SWidth, g->SHeight, lim, "gif");
  // First frame only (Pillow opens frame 0): read records until the first image.
  image img;
  img.format = "gif";
  img.mode = pixel_mode::P;
  img.width = g->SWidth;
  img.height = g->SHeight;
  int transparent = -1;
  GifRecordType rec;
  do {
    if (DGifGetRecordType(g, &rec) == GIF_ERROR) fail(std::string("cannot decode the gif image: ") + gif_error(g->Error));
    if (rec == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) fail("cannot decode the gif image: bad extension");
      while (ext) {
        if (code == GRAPHICS_EXT_FUNC_CODE && ext[0] >= 4 && (ext[1] & 1)) transparent = ext[4];
        if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) fail("cannot decode the gif image: bad extension");
        code = 0;
      }
    } else if (rec == IMAGE_DESC_RECORD_TYPE) {
      if (DGifGetImageDesc(g) == GIF_ERROR) fail(std::string("cannot decode the gif image: ") + gif_error(g->Error));
      const GifImageDesc& d = g->Image;
      const ColorMapObject* cm = d.ColorMap ? d.ColorMap : g->SColorMap;
      if (!cm) fail("cannot decode the gif image: no colour table");
      img.palette.assign(256, {0, 0, 0, 255});
      for (int i = 0; i < cm->ColorCount && i < 256; ++i)
        img.palette[static_cast<std::size_t>(i)] = {cm->Colors[i].Red, cm->Colors[i].Green, cm->Colors[i].Blue, 255};
      if (transparent >= 0) img.palette[static_cast<std::size_t>(transparent)][3] = 0;
      // Outside the first frame's rectangle: the transparent index, else the background index.
      const std::uint8_t fill = static_cast<std::uint8_t>(transparent >= 0 ? transparent : g->SBackGroundColor);
      img.px.assign(static_cast<std::size_t>(img.width) * img.height, fill);
      if (d.Width <= 0 || d.Height <= 0 || static_cast<std::int64_t>(d.Width) * d.Height > lim.max_pixels)
        fail("cannot decode the gif image: bad frame size");
      std::vector<GifPixelType> line(static_cast<std::size_t>(d.Width));
      std::vector<int> order;
      if (d.Interlace) {
        for (int start : {0, 4, 2, 1})
          for (int y = start; y < d.Height; y += start == 0 ? 8 : start == 4 ? 8 : start == 2 ? 4 : 2) order.push_back(y);
      } else {
        for (int y = 0; y < d.Height; ++y) order.push_back(y);
      }
      for (int y : order) {
        if (DGifGetLine(g, line.data(), d.Width) == GIF_ERROR) fail(std::string("cannot decode the gif image: ") + gif_error(g->Error));
        const int yy = d.Top + y;
        if (yy < 0 || yy >= img.height) continue;
        for (int x = 0; x < d.Width; ++x) {
          const int xx = d.Left + x;
          if (xx >= 0 && xx < img.width) img.px[static_cast<std::size_t>(yy) * img.width + xx] = line[static_cast<std::size_t>(x)];
        }
      }
      return img;
    }
  } while (rec != TERMINATE_RECORD_TYPE);
  fail("cannot decode the gif image: it has no frame");
}

} // namespace

image decode_image(const std::uint8_t* data, std::size_t size, const decode_limits& lim) {
  auto starts = [&](const char* sig, std::size_t n, std::size_t at = 0) {
    return size >= at + n && std::memcmp(data + at, sig, n) == 0;
  };
  if (starts("\x89PNG\r\n\x1a\n", 8)) return decode_png(data, size, lim);
  if (starts("\xff\xd8\xff", 3)) return decode_jpeg(data, size, lim);
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return decode_webp(data, size, lim);
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return decode_gif(data, size, lim);
  fail("cannot identify the image file (" + std::to_string(size) +
       " bytes; supported formats: PNG, JPEG, WebP, GIF)");
}

} // namespace k3::vision
