package kahuna

// ClientNative reports whether c's server offers the native service (tests).
func ClientNative(c *Client) (native, known bool) {
	if c.grpc == nil {
		return false, true
	}
	return c.grpc.Native()
}
