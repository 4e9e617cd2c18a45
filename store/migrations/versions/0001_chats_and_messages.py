"""Chats per owner, and their messages, a row each."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "chats",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("system", sa.Text, nullable=False),
        sa.Column("tools", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
    )
    op.create_index("ix_chats_owner_updated", "chats", ["owner", "updated"])
    op.create_table(
        "messages",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("chat_id", sa.String(64), sa.ForeignKey("chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_messages_chat_id", "messages", ["chat_id", "id"])


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_table("chats")
