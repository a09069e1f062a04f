"""SillyTavern chats, world info and character cards: formats, activation, search, mount."""
