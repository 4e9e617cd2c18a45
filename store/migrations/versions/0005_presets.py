"""Named presets (a system prompt and generation settings) per user; and deleted chats first
marked, so that their delete can be undone for a while, then purged."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chats") as batch:
        batch.add_column(sa.Column("deleted", sa.Float, nullable=True))
    op.create_table(
        "presets",
        sa.Column("owner", sa.String(200), primary_key=True),
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("system", sa.Text, nullable=False),
        sa.Column("generation", sa.JSON, nullable=False),
        sa.Column("updated", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("presets")
    with op.batch_alter_table("chats") as batch:
        batch.drop_column("deleted")
