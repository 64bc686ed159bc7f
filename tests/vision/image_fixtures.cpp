#include "tests/vision/image_fixtures.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <gif_lib.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>
#include <zlib.h>

namespace k3::test {

std::string png_bytes(const png_spec& s) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::string out;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error("png write failed");
  }
  png_set_write_fn(png, &out, [](png_structp p, png_bytep d, png_size_t n) {
    static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<const char*>(d), n);
  }, [](png_structp) {});
  png_set_IHDR(png, info, static_cast<png_uint_32>(s.width), static_cast<png_uint_32>(s.height), s.bit_depth, s.color_type,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> pal;
  for (const auto& c : s.palette) pal.push_back({c[0], c[1], c[2]});
  if (!pal.empty()) png_set_PLTE(png, info, pal.data(), static_cast<int>(pal.size()));
  if (!s.trns.empty()) {
    if (s.color_type == 3) {
      png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
    } else {
      png_color_16 key{};
      if (s.color_type == 0) key.gray = static_cast<png_uint_16>((s.trns[0] << 8) | s.trns[1]);
      else {
        key.red = static_cast<png_uint_16>((s.trns[0] << 8) | s.trns[1]);
        key.green = static_cast<png_uint_16>((s.trns[2] << 8) | s.trns[3]);
        key.blue = static_cast<png_uint_16>((s.trns[4] << 8) | s.trns[5]);
      }
      png_set_tRNS(png, info, nullptr, 0, &key);
    }
  }
  png_write_info(png, info);
  const std::size_t rowbytes = png_get_rowbytes(png, info);
  for (int y = 0; y < s.height; ++y) png_write_row(png, const_cast<png_bytep>(s.rows.data() + static_cast<std::size_t>(y) * rowbytes));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::string png_header_only(std::uint32_t w, std::uint32_t h) {
  auto chunk = [](const char* type, const std::string& data) {
    std::string c;
    const std::uint32_t n = static_cast<std::uint32_t>(data.size());
    for (int i = 3; i >= 0; --i) c.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    std::string td = std::string(type, 4) + data;
    c += td;
    const std::uint32_t crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size())));
    for (int i = 3; i >= 0; --i) c.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
    return c;
  };
  std::string ihdr;
  for (std::uint32_t v : {w, h})
    for (int i = 3; i >= 0; --i) ihdr.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);
  // One IDAT of a few zero rows: what a compressed bomb starts with (the header is enough).
  std::string raw(1024, '\0'), z(2048, '\0');
  uLongf zn = z.size();
  compress(reinterpret_cast<Bytef*>(z.data()), &zn, reinterpret_cast<const Bytef*>(raw.data()), raw.size());
  z.resize(zn);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", z) + chunk("IEND", "");
}

std::string jpeg_bytes(int w, int h, int components, const std::vector<std::uint8_t>& px, int quality) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = components;
  c.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  if (components == 4) c.write_Adobe_marker = TRUE;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data() + static_cast<std::size_t>(c.next_scanline) * w * components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

std::string webp_lossless(int w, int h, int channels, const std::vector<std::uint8_t>& px) {
  std::uint8_t* out = nullptr;
  const std::size_t n = channels == 4 ? WebPEncodeLosslessRGBA(px.data(), w, h, w * 4, &out)
                                      : WebPEncodeLosslessRGB(px.data(), w, h, w * 3, &out);
  std::string s(reinterpret_cast<const char*>(out), n);
  WebPFree(out);
  return s;
}

std::string gif_bytes(int w, int h, int left, int top, int fw, int fh, const std::vector<std::uint8_t>& idx,
                      const std::vector<std::array<std::uint8_t, 3>>& palette, int transparent) {
  std::string out;
  int e = 0;
  GifFileType* g = EGifOpen(&out, [](GifFileType* gf, const GifByteType* d, int n) {
    static_cast<std::string*>(gf->UserData)->append(reinterpret_cast<const char*>(d), static_cast<std::size_t>(n));
    return n;
  }, &e);
  int size = 2;
  while (size < static_cast<int>(palette.size())) size *= 2;
  std::vector<GifColorType> cols(static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < palette.size(); ++i) cols[i] = {palette[i][0], palette[i][1], palette[i][2]};
  ColorMapObject* cm = GifMakeMapObject(size, cols.data());
  EGifSetGifVersion(g, true);
  EGifPutScreenDesc(g, w, h, 8, 0, cm);
  if (transparent >= 0) {
    GifByteType ext[4] = {1, 0, 0, static_cast<GifByteType>(transparent)};
    EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, 4, ext);
  }
  EGifPutImageDesc(g, left, top, fw, fh, false, nullptr);
  for (int y = 0; y < fh; ++y) EGifPutLine(g, const_cast<GifPixelType*>(idx.data() + static_cast<std::size_t>(y) * fw), fw);
  EGifCloseFile(g, &e);
  GifFreeMapObject(cm);
  return out;
}

std::string base64(const std::string& b) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  std::size_t i = 0;
  for (; i + 2 < b.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(b[i]) << 16) | (static_cast<unsigned char>(b[i + 1]) << 8) | static_cast<unsigned char>(b[i + 2]);
    o += a[v >> 18], o += a[(v >> 12) & 63], o += a[(v >> 6) & 63], o += a[v & 63];
  }
  if (i + 1 == b.size()) {
    const unsigned v = static_cast<unsigned char>(b[i]) << 16;
    o += a[v >> 18], o += a[(v >> 12) & 63], o += "==";
  } else if (i + 2 == b.size()) {
    const unsigned v = (static_cast<unsigned char>(b[i]) << 16) | (static_cast<unsigned char>(b[i + 1]) << 8);
    o += a[v >> 18], o += a[(v >> 12) & 63], o += a[(v >> 6) & 63], o += '=';
  }
  return o;
}

} // namespace k3::test
