"""A login's colour scheme and language for the page, kept with their chats."""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "page_preferences",
        sa.Column("owner", sa.String(200), primary_key=True),
        sa.Column("colour_scheme", sa.String(16), nullable=True),
        sa.Column("language", sa.String(16), nullable=True),
        sa.Column("updated", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("page_preferences")
