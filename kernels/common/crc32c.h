// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) in portable C++, a
// byte at a time from a 256-entry table. The op library uses absl's hardware
// CRC32C (payload_kernels.cc); this one is for code built without TF (the
// fuzz harness), which checks it against real containers.
#ifndef DEEPREDUCE_KERNELS_COMMON_CRC32C_H_
#define DEEPREDUCE_KERNELS_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace deepreduce {

inline uint32_t Crc32cPortable(const uint8_t* data, size_t size) {
  static const struct Table {
    uint32_t v[256];
    Table() {
      for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int j = 0; j < 8; ++j) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        v[i] = c;
      }
    }
  } table;
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = (crc >> 8) ^ table.v[(crc ^ data[i]) & 0xFFu];
  return crc ^ 0xFFFFFFFFu;
}

}  // namespace deepreduce

#endif  // DEEPREDUCE_KERNELS_COMMON_CRC32C_H_
