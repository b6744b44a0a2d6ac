"""Types of the compiled reader (schemas/_packed.c); `schemas.packed_columns` is its Python face."""

def read(raws: list[bytes], paths: tuple[str, ...], kinds: bytes, max_elements: int, /
         ) -> tuple[bytearray, dict[str, tuple[bytearray | list[str | None], bytearray]]] | None: ...
