"""Fill any kio entity with deterministic non-default values (for cross-checks and benchmarks)."""
import datetime, uuid
from dataclasses import fields, is_dataclass
from kio.serial._introspect import classify_field, get_schema_field_type, is_optional, EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField
from kio.schema.errors import ErrorCode

def prim(kt, ty, k):
    if kt in ("int8",): return ty(3 + k % 5)
    if kt in ("int16","uint16"): return ty(300 + k)
    if kt in ("int32","uint32"): return ty(70000 + k)
    if kt in ("int64",): return ty(5_000_000_000 + k)
    if kt == "uint64": return ty(5_000_000_000 + k)
    if kt == "float64": return ty(1.5)
    if kt == "string": return ty(f"s{k}") if ty is not str else f"s{k}"
    if kt in ("bytes", "records"): return ty(bytes([k % 256]) * 5)
    if kt == "uuid": return uuid.UUID(int=0x1234 + k)
    if kt == "bool": return True
    if kt == "error_code": return ErrorCode.invalid_request
    if kt == "timedelta_i32": return ty.parse(datetime.timedelta(milliseconds=1234 + k))
    if kt == "timedelta_i64": return ty.parse(datetime.timedelta(milliseconds=123456 + k))
    if kt == "datetime_i64": return datetime.datetime(2024,1,1,tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=k)
    raise NotImplementedError(kt)

def sample(cls, k=1, n=2):
    kw = {}
    for i, f in enumerate(fields(cls)):
        c = classify_field(f)
        match c:
            case EntityField(t): v = sample(t, k + i, n)
            case EntityTupleField(t): v = tuple(sample(t, k + i + j, n) for j in range(n))
            case PrimitiveTupleField(t): v = tuple(prim(get_schema_field_type(f), t, k + i + j) for j in range(n))
            case PrimitiveField(t):
                kt = get_schema_field_type(f)
                if kt in ("datetime_i64",) or t.__name__ in ("TZAware",): v = prim("datetime_i64", t, k+i)
                else: v = prim(kt, t, k + i)
        kw[f.name] = v
    return cls(**kw)
