"""The record: everything one run found, the only thing sinks read (attnlab.record.model), as
JSON (codec), on disk (files), checked before it is read (validate); built once from its parts (parts)."""

from attnlab.record.codec import FORMAT_VERSION, INLINE_LIMIT, from_json_dict, to_json_dict
from attnlab.record.files import RECORD_FILE, WriteError, read_record, write_atomic, write_record, written
from attnlab.record.keeping import keeping_stages, spilled, without_stages
from attnlab.record.model import Effect, Finding, ModelInfo, Prediction, Record, Side, canonical_shape
from attnlab.record.parts import Diagnosis, Pair, Setup, record_of
from attnlab.record.validate import RecordError, check_record_data

__all__ = ["FORMAT_VERSION", "INLINE_LIMIT", "RECORD_FILE", "Diagnosis", "Effect", "Finding", "ModelInfo", "Pair",
           "Prediction", "Record", "RecordError", "Setup", "Side", "WriteError", "canonical_shape", "check_record_data",
           "from_json_dict", "keeping_stages", "read_record", "record_of", "spilled", "to_json_dict", "without_stages",
           "write_atomic", "write_record", "written"]
