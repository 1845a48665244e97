package promwire

import (
	"bytes"
	"encoding/binary"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

var format = expfmt.NewFormat(expfmt.TypeProtoDelim)

// Encode writes families in the delimited protobuf exposition format.
func Encode(families []*dto.MetricFamily) ([]byte, error) {
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
	}
	return buf.Bytes(), nil
}

// Decode reads the families Encode wrote; a truncated or malformed
// message is an error naming how many families were read before it. A
// length prefix is checked against the bytes that are really there before
// anything is allocated (expfmt's decoder trusts it, so seven bytes could
// ask it for terabytes).
func Decode(b []byte) ([]*dto.MetricFamily, error) {
	var out []*dto.MetricFamily
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("metric family %d: bad length prefix", len(out)+1)
		}
		b = b[k:]
		if n > uint64(len(b)) {
			return nil, fmt.Errorf("metric family %d: %d bytes announced, %d left", len(out)+1, n, len(b))
		}
		mf := &dto.MetricFamily{}
		if err := proto.Unmarshal(b[:n], mf); err != nil {
			return nil, fmt.Errorf("metric family %d: %w", len(out)+1, err)
		}
		b = b[n:]
		out = append(out, mf)
	}
	return out, nil
}
