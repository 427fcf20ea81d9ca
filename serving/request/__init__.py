"""The compact request encoding (docs/request-encoding.md), used by the client to write
requests and by serving to read them: varint key blocks and the token dictionary. Imports
ctr.data and ctr.format only."""
