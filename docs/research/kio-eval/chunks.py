"""Zero-copy response encoding: kio writers only call .write(); collect chunks, send with transport.writelines()."""
import struct
from kio.static.primitive import i32
import wire

class Chunks(list):
    write = list.append

def encode_response_chunks(correlation_id, response):
    _, write_header, write_body = wire.response_codec(response.__api_key__, response.__version__)
    out = Chunks([b""])
    write_header(out, response.__header_schema__(correlation_id=i32(correlation_id)))
    write_body(out, response)
    out[0] = struct.pack(">i", sum(map(len, out)))
    return out
