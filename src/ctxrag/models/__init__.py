from ctxrag.models.chat import make_chat_model
from ctxrag.models.gguf import local_model_path
