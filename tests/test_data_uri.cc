// Inline images as clients send them: base64 and data: URIs decoded exactly, anything malformed refused.
#include <gtest/gtest.h>

#include "server/data_uri.h"

namespace cachet::server {
namespace {

TEST(DataUri, Base64RoundTripsAndRefusesGarbage) {
  EXPECT_EQ(*base64_decode(""), "");
  EXPECT_EQ(*base64_decode("TWFu"), "Man");
  EXPECT_EQ(*base64_decode("TWE="), "Ma");
  EXPECT_EQ(*base64_decode("TWE"), "Ma");  // padding optional
  EXPECT_EQ(*base64_decode("TQ=="), "M");
  EXPECT_EQ(*base64_decode("TW Fu\nTQ=="), "ManM");
  EXPECT_EQ(*base64_decode("/+8="), std::string("\xff\xef"));
  EXPECT_FALSE(base64_decode("T"));        // a lone character is no byte
  EXPECT_FALSE(base64_decode("TWF@"));     // not in the alphabet
  EXPECT_FALSE(base64_decode("TQ==TQ=="));  // data after padding
  EXPECT_FALSE(base64_decode("TR=="));     // non-zero bits past the last byte
  EXPECT_FALSE(base64_decode("TWFu-_"));   // the URL-safe alphabet is not the standard one
}

TEST(DataUri, ParsesAndExplainsWhatItRefuses) {
  DataUri d = parse_data_uri("data:image/png;base64,iVBORw==");
  EXPECT_EQ(d.error, "");
  EXPECT_EQ(d.media_type, "image/png");
  EXPECT_EQ(d.bytes, std::string("\x89PNG", 4));
  d = parse_data_uri("data:,a%20b");
  EXPECT_EQ(d.error, "");
  EXPECT_EQ(d.bytes, "a b");
  EXPECT_NE(parse_data_uri("https://example.com/x.png").error.find("not fetched"), std::string::npos);
  EXPECT_NE(parse_data_uri("file:///etc/passwd").error.find("data: URI"), std::string::npos);
  EXPECT_NE(parse_data_uri("data:image/png;base64").error, "");
  EXPECT_NE(parse_data_uri("data:image/png;base64,").error.find("empty"), std::string::npos);
  EXPECT_NE(parse_data_uri("data:image/png;base64,%%%").error.find("base64"), std::string::npos);
  EXPECT_NE(parse_data_uri("data:,%4").error.find("escape"), std::string::npos);
  d = parse_data_uri("data:,abc%4");  // a bad escape after good bytes (found by fuzz_request): no bytes
  EXPECT_NE(d.error, "");
  EXPECT_EQ(d.bytes, "");
}

}  // namespace
}  // namespace cachet::server
