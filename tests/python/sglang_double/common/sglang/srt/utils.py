"""Double of sglang/srt/utils/common.py's MultiprocessingSerializer (2234-2273): ForkingPickler
bytes (CUDA tensors as IPC handles; here CPU tensors by value), base64 text with
output_str=True; deserialize takes either."""

import base64
import io
import pickle
from typing import Any, Union


class MultiprocessingSerializer:
    @staticmethod
    def serialize(obj: Any, output_str: bool = False) -> Union[bytes, str]:
        buf = io.BytesIO()
        pickle.Pickler(buf).dump(obj)
        data = buf.getvalue()
        return base64.b64encode(data).decode() if output_str else data

    @staticmethod
    def deserialize(data: Union[bytes, str]) -> Any:
        if isinstance(data, str):
            data = base64.b64decode(data, validate=True)
        return pickle.loads(data)
