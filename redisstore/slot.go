package redisstore

// Slot returns the Redis Cluster hash slot (0 to 16383) that holds every
// key of key's checks: all of them share the hash tag, so the slot depends
// on the caller's key alone, not on the limits or the prefix.
//
// It lets a caller split work by shard without asking the cluster, for
// example to keep one circuit breaker per group of slots (see
// fallback.NewPartitioned), so that a failed primary degrades only the keys
// it held.
func Slot(key string) int {
	tag := appendTag(nil, key)
	return int(crc16(tag) & 16383)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster uses to map a key to its slot.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
